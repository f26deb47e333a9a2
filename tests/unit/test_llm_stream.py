"""The hand-over of a step's deltas from the engine thread to the event loops (stream.py)."""

from __future__ import annotations

import asyncio
import threading

import pytest

from rosettaserve.core.generate import FinishReason, GenerateDelta
from rosettaserve.runtimes.llm import stream as stream_module
from rosettaserve.runtimes.llm.stream import GenerationStream, Item, hand_over


def delta(text: str, last: bool = False) -> GenerateDelta:
    out = GenerateDelta(index=0, text=text, token_ids=[1])
    if last:
        out.finish_reason = FinishReason.LENGTH
    return out


def test_hand_over_returns_once_the_consumers_took_the_deltas(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(stream_module, "HANDOVER_WAIT_S", 60.0)  # a slow machine: no early return
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        got: list[str] = []
        stream = GenerationStream(loop, 1, lambda: None)

        async def consume() -> None:
            async for d in stream:
                got.append(d.text)

        task = asyncio.run_coroutine_threadsafe(consume(), loop)
        for step, text in enumerate(["a", "b", "c"]):
            outbox: dict[asyncio.AbstractEventLoop, list[tuple[GenerationStream, Item]]] = {
                loop: [(stream, delta(text, last=step == 2))]
            }
            hand_over(outbox)  # from this thread, as the engine thread does
            assert got == ["a", "b", "c"][: step + 1]  # the consumer ran before it returned
        task.result(timeout=10)
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=10)
        loop.close()


def test_a_closed_loop_cancels_its_streams() -> None:
    loop = asyncio.new_event_loop()
    stream = GenerationStream(loop, 1, lambda: None)
    loop.close()
    hand_over({loop: [(stream, delta("a"))]})
    assert stream.cancelled
