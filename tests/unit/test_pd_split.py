"""Each family's own stream formatter, run once on a prefill instance and once on a decode
instance (hooks.SplitStream): what the client gets from the two is byte for byte what one
mixed instance sends. Also the /dresult hub: one reader, replacement with close:, heartbeat."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable

import orjson
import pytest

from rosettaserve.core.errors import ModelError
from rosettaserve.core.generate import (
    FinishReason,
    GenerateDelta,
    GenerateRequest,
    Usage,
)
from rosettaserve.pd import wire
from rosettaserve.pd.dresult import DResultHub
from rosettaserve.pd.hooks import Interrupted, SplitStream
from rosettaserve.protocols.mindie import rest as mindie
from rosettaserve.protocols.openai import rest as openai
from rosettaserve.protocols.openai.convert import Reply
from rosettaserve.protocols.openai.schema import OpenAIRequest
from rosettaserve.protocols.tgi import rest as tgi
from rosettaserve.protocols.tgi.schema import tgi_request
from rosettaserve.protocols.triton_generate import rest as triton
from rosettaserve.protocols.vllm import rest as vllm

TEXTS = ["Once", " upon", "", " a t", "ime"]  # "" : a character or stop string held back


def deltas() -> list[GenerateDelta]:
    out = [GenerateDelta(0, t, [10 + i], [False]) for i, t in enumerate(TEXTS)]
    last = out[-1]
    last.finish_reason, last.usage, last.seed = FinishReason.LENGTH, Usage(4, len(TEXTS)), 3
    return out


class Engine:
    """Stands in for the engine's stream: yields the given deltas, then ends or fails."""

    def __init__(self, items: list[GenerateDelta], fail: bool = False) -> None:
        self.items, self.fail, self.cancelled = list(items), fail, False

    def __aiter__(self) -> Engine:
        return self

    async def __anext__(self) -> GenerateDelta:
        if self.items:
            return self.items.pop(0)
        if self.fail:
            raise ModelError("the model failed")
        raise StopAsyncIteration

    def cancel(self) -> None:
        self.cancelled = True


Formatter = Callable[[AsyncIterator[GenerateDelta]], AsyncIterator[bytes]]
REPLY, TEXT_REPLY = Reply("chat", "m"), Reply("text", "m")
FORMATTERS: dict[str, Formatter] = {
    "openai-chat": lambda d: openai.chat_stream(
        REPLY, OpenAIRequest("m", GenerateRequest(stream=True), include_usage=True), d
    ),
    "openai-text": lambda d: openai.text_stream(
        TEXT_REPLY, OpenAIRequest("m", GenerateRequest(stream=True)), d, "Echo:"
    ),
    "tgi": lambda d: tgi.event_stream(
        tgi_request({"inputs": "x", "parameters": {"details": True}}, 4, True), d, "", frozenset()
    ),
    "vllm": lambda d: vllm.cumulative_chunks("Prompt", 1, d),
    "vllm-mindie": lambda d: vllm.delta_chunks("Prompt", 1, d),
    "triton": lambda d: triton.event_stream(triton.Reply({"id": "7"}, "m", "1", True), d),
    "mindie": lambda d: mindie.event_stream(d, True, None),
}


async def drain(chunks: AsyncIterator[bytes], split: SplitStream | None) -> tuple[bytes, bool]:
    """The chunks new to the client, and whether the handler ran to its end."""
    out = b""
    try:
        async for chunk in chunks:
            if split is None or split.keep:
                out += chunk
    except Interrupted:
        return out, False
    return out, True


def normalized(body: bytes) -> bytes:
    """MindIE's events carry wall-clock timings; everything else must match exactly."""
    if b"prefill_time" not in body:
        return body
    events = [orjson.loads(e.removeprefix(b"data: ")) for e in body.split(b"\n\n") if e]
    return orjson.dumps([{k: v for k, v in e.items() if not k.endswith("_time")} for e in events])


async def stamped(make: Formatter, items: list[GenerateDelta]) -> list[tuple[int, bytes]]:
    """One mixed run: each chunk with the number of deltas handed out when it was made."""
    s = SplitStream(Engine(items), [], 0)  # type: ignore[arg-type]
    return [(s.handed, chunk) async for chunk in make(s)]


@pytest.mark.parametrize("family", FORMATTERS)
@pytest.mark.parametrize("prior", [0, 2])  # 2: a recompute whose first two tokens were sent
def test_prefill_and_decode_halves_make_the_mixed_stream(family: str, prior: int) -> None:
    make = FORMATTERS[family]
    all_deltas = deltas()

    async def run() -> tuple[list[tuple[int, bytes]], bytes]:
        mixed = await stamped(make, all_deltas)
        p = SplitStream(Engine(all_deltas[: prior + 1]), [], prior, stop_after=prior + 1)  # type: ignore[arg-type]
        at_p, p_ended = await drain(make(p), p)
        d = SplitStream(Engine(all_deltas[prior + 1 :]), p.seen, prior + 1)  # type: ignore[arg-type]
        at_d, d_ended = await drain(make(d), d)
        assert not p_ended
        assert d_ended
        assert d.done
        assert [x.token_ids for x in p.seen] == [x.token_ids for x in all_deltas[: prior + 1]]
        return mixed, at_p + at_d

    mixed, split = asyncio.run(run())
    sent_before = b"".join(c for handed, c in mixed if handed <= prior) if prior else b""
    assert split
    assert normalized(sent_before + split) == normalized(b"".join(c for _, c in mixed))


def test_a_single_token_request_ends_at_prefill() -> None:
    (last,) = deltas()[-1:]

    async def run() -> tuple[bytes, bool, bool]:
        p = SplitStream(Engine([last]), [], 0, stop_after=1)  # type: ignore[arg-type]
        out, ended = await drain(FORMATTERS["tgi"](p), p)
        return out, ended, p.done

    out, ended, done = asyncio.run(run())
    assert ended
    assert done
    assert b'"generated_text":"ime"' in out


def test_an_engine_failure_interrupts_instead_of_making_an_error_chunk() -> None:
    async def run() -> tuple[bytes, SplitStream]:
        d = SplitStream(Engine(deltas()[1:3], fail=True), deltas()[:1], 1)  # type: ignore[arg-type]
        out, ended = await drain(FORMATTERS["openai-text"](d), d)
        assert not ended
        return out, d

    out, split = asyncio.run(run())
    assert split.failure is not None
    assert split.failure.message == "the model failed"
    assert b"error" not in out  # the instance decides how the failure travels (error: frame)
    assert out.count(b"data: ") == 1  # " upon" ("" makes no chunk)
    assert b'" upon"' in out


# -- the /dresult hub ----------------------------------------------------------------------------


def test_one_reader_at_a_time_with_close_and_heartbeat() -> None:
    lost: list[int] = []

    async def scenario() -> tuple[list[bytes], list[bytes]]:
        hub = DResultHub(heartbeat=0.05, on_lost=lambda: lost.append(1))
        assert not hub.send(b"nobody")
        first = hub.open()
        assert hub.send(wire.frame("1", wire.DATA, b"a"))
        assert hub.send(wire.frame("2", wire.DATA, b"b"))
        got_first = [await first.__anext__()]  # queued frames leave as one chunk
        second = hub.open()  # replaces the first: close: then its end
        got_first += [c async for c in first]
        hub.send(wire.frame("1", wire.LAST, b"c"))
        got_second = [await second.__anext__()]
        while got_second[-1] != wire.KEEPALIVE:
            got_second.append(await second.__anext__())
        hub.close()
        got_second += [c async for c in second]
        assert not hub.connected
        return got_first, got_second

    first, second = asyncio.run(asyncio.wait_for(scenario(), 10))
    assert first == [b"reqId:1\0data:a\0reqId:2\0data:b\0", wire.close_frame()]
    assert second[0] == b"reqId:1\0lastData:c\0"
    assert second[-1] == wire.KEEPALIVE
    assert lost == [1]  # only the reader nobody replaced counts as lost
