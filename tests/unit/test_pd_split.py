"""Each family's own framer, run once on a prefill instance and once on a decode instance (each
endpoint runs once per instance, with its split): what the client gets from the two is byte
for byte what one mixed instance sends. Also the /dresult hub: one reader, the first one kept
(a second is refused), heartbeat."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import orjson
import pytest

from rosettaserve.core.errors import ModelError
from rosettaserve.core.generate import (
    DeltaStream,
    FinishReason,
    GenerateDelta,
    GenerateRequest,
    Usage,
)
from rosettaserve.core.generation_plane import Framer, Generation, frames
from rosettaserve.core.registry import ModelVersion
from rosettaserve.pd import wire
from rosettaserve.pd.dresult import DResultHub, ReaderConnected
from rosettaserve.pd.parts import Part
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


REPLY, TEXT_REPLY = Reply("chat", "m"), Reply("text", "m")
FRAMERS: dict[str, Callable[[], Framer]] = {
    "openai-chat": lambda: openai.ChatFramer(
        REPLY, OpenAIRequest("m", GenerateRequest(stream=True), include_usage=True)
    ),
    "openai-text": lambda: openai.TextFramer(
        TEXT_REPLY, OpenAIRequest("m", GenerateRequest(stream=True)), "Echo:"
    ),
    "tgi": lambda: tgi.TgiFramer(
        tgi_request({"inputs": "x", "parameters": {"details": True}}, 4, True), "", frozenset()
    ),
    "vllm": lambda: vllm.CumulativeFramer("Prompt", 1),
    "vllm-mindie": lambda: vllm.DeltaFramer(1),
    "triton": lambda: triton.TritonFramer(triton.Reply({"id": "7"}, "m", "1", True)),
    "mindie": lambda: mindie.MindieFramer(True, None),
}


class Split:
    """The plane's split argument, as the roles make it (prefill.py, decode.py)."""

    def __init__(self, part: Part, sent: int) -> None:
        self.part, self.sent, self.identity = part, sent, dict[str, Any]()
        self.prompt_tokens: int | None = 0

    def start(self, generator: Any, request: GenerateRequest) -> DeltaStream:
        return self.part


def generation(stream: DeltaStream, sent: int = 0) -> Generation:
    split = Split(stream, sent) if isinstance(stream, Part) else None  # type: ignore[arg-type]
    mv = ModelVersion("m", "1", "llm")
    return Generation(mv, stream, 1, family="t", split=split, series=None, start=0, timeout_s=0)


async def drain(make: Callable[[], Framer], g: Generation) -> list[tuple[int, bytes]]:
    """Every chunk, with the number of deltas handed out when it was made."""
    return [(g.handed, chunk) async for chunk in frames(make(), g)]


def normalized(body: bytes) -> bytes:
    """MindIE's events carry wall-clock timings; everything else must match exactly."""
    if b"prefill_time" not in body:
        return body
    events = [orjson.loads(e.removeprefix(b"data: ")) for e in body.split(b"\n\n") if e]
    return orjson.dumps([{k: v for k, v in e.items() if not k.endswith("_time")} for e in events])


def joined(chunks: list[tuple[int, bytes]]) -> bytes:
    return b"".join(c for _, c in chunks)


@pytest.mark.parametrize("family", FRAMERS)
@pytest.mark.parametrize("prior", [0, 2])  # 2: a recompute whose first two tokens were sent
def test_prefill_and_decode_halves_make_the_mixed_stream(family: str, prior: int) -> None:
    make = FRAMERS[family]
    all_deltas = deltas()

    async def run() -> tuple[list[tuple[int, bytes]], bytes]:
        mixed = await drain(make, generation(Engine(all_deltas)))  # type: ignore[arg-type]
        p = Part(Engine(all_deltas[: prior + 1]), stop_after=prior + 1)  # type: ignore[arg-type]
        at_p = await drain(make, generation(p, prior))
        d = Part(Engine(all_deltas[prior + 1 :]), p.seen)  # type: ignore[arg-type]
        at_d = await drain(make, generation(d, prior + 1))
        assert not p.done
        assert d.done
        assert [x.token_ids for x in p.seen] == [x.token_ids for x in all_deltas[: prior + 1]]
        return mixed, joined(at_p) + joined(at_d)

    mixed, split = asyncio.run(run())
    sent_before = b"".join(c for handed, c in mixed if handed <= prior) if prior else b""
    assert split
    assert normalized(sent_before + split) == normalized(joined(mixed))


def test_a_single_token_request_ends_at_prefill() -> None:
    (last,) = deltas()[-1:]

    async def run() -> tuple[bytes, bool]:
        p = Part(Engine([last]), stop_after=1)  # type: ignore[arg-type]
        out = joined(await drain(FRAMERS["tgi"], generation(p)))
        return out, p.done

    out, done = asyncio.run(run())
    assert done
    assert b'"generated_text":"ime"' in out


def test_an_engine_failure_is_recorded_and_framed_as_the_last_chunk() -> None:
    async def run() -> tuple[bytes, Part]:
        d = Part(Engine(deltas()[1:3], fail=True), deltas()[:1])  # type: ignore[arg-type]
        return joined(await drain(FRAMERS["openai-text"], generation(d, 1))), d

    out, part = asyncio.run(run())
    assert part.failure is not None
    assert part.failure.message == "the model failed"
    # the decode instance sees the failure before the error chunk and sends retry:/error:
    assert out.count(b"data: ") == 3  # " upon" ("" makes no chunk), the error, [DONE]
    assert b'" upon"' in out
    assert b'"the model failed"' in out


# -- the /dresult hub ----------------------------------------------------------------------------


def test_the_first_reader_keeps_the_stream_and_a_second_is_refused() -> None:
    lost: list[int] = []

    async def scenario() -> tuple[list[bytes], int]:
        hub = DResultHub(heartbeat=0.05, on_lost=lambda: lost.append(1))
        assert not hub.send(b"nobody")
        first = hub.open()
        got = [await _started(first, hub)]
        assert hub.send(wire.frame("1", wire.DATA, b"a"))
        assert hub.send(wire.frame("2", wire.DATA, b"b"))
        got.append(await first.__anext__())  # queued frames leave as one chunk
        with pytest.raises(ReaderConnected, match="another reader is connected") as refused:
            hub.open()  # a second reader: refused, and the first one notices nothing
        assert refused.value.http_status == 409
        hub.send(wire.frame("1", wire.LAST, b"c"))
        got.append(await first.__anext__())
        while got[-1] != wire.KEEPALIVE:
            got.append(await first.__anext__())
        hub.close()
        got += [c async for c in first]
        assert not hub.connected
        return got, hub.refused

    got, refused = asyncio.run(asyncio.wait_for(scenario(), 10))
    assert got[0] == wire.KEEPALIVE  # (the stream started on an idle hub)
    assert got[1:3] == [b"reqId:1\0data:a\0reqId:2\0data:b\0", b"reqId:1\0lastData:c\0"]
    assert got[-1] == wire.KEEPALIVE
    assert wire.close_frame() not in got
    assert (refused, lost) == (1, [1])  # the one reader, lost once: when it ended


def test_a_reader_counts_from_the_start_of_its_stream() -> None:
    """A stream made and never sent (a HEAD, a connection gone first) holds nothing; of two
    made at once, the one that starts first is the reader and the other ends empty."""

    async def scenario() -> tuple[list[bytes], list[bytes], int]:
        hub = DResultHub(heartbeat=0.05, on_lost=lambda: None)
        unsent = hub.open()
        await unsent.aclose()  # type: ignore[attr-defined]
        assert not hub.connected
        one, two = hub.open(), hub.open()
        first = [await _started(one, hub)]
        second = [c async for c in two]
        hub.close()
        first += [c async for c in one]
        return first, second, hub.connections

    first, second, connections = asyncio.run(asyncio.wait_for(scenario(), 10))
    assert (first, second, connections) == ([wire.KEEPALIVE], [], 1)


async def _started(stream: Any, hub: DResultHub) -> bytes:
    """The stream's first chunk (a heartbeat, on an idle hub): it is the reader from then on."""
    chunk: bytes = await stream.__anext__()
    assert hub.connected
    return chunk
