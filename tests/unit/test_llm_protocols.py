"""The LLM families' stream framers, driven as the generation plane drives them: exact framing,
and an error after the stream began arriving as that family's error frame."""

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
    SamplingParams,
    Usage,
)
from rosettaserve.core.generation_plane import Framer, Generation, frames
from rosettaserve.core.registry import ModelVersion
from rosettaserve.protocols.mindie import rest as mindie
from rosettaserve.protocols.openai import rest as openai
from rosettaserve.protocols.openai.convert import Reply
from rosettaserve.protocols.openai.schema import OpenAIRequest
from rosettaserve.protocols.tgi import rest as tgi
from rosettaserve.protocols.tgi.schema import tgi_request
from rosettaserve.protocols.triton_generate import rest as triton
from rosettaserve.protocols.vllm import rest as vllm

Deltas = AsyncIterator[GenerateDelta]


def delta(text: str, token: int, finish: FinishReason | None = None) -> GenerateDelta:
    d = GenerateDelta(0, text, [token], [False])
    if finish is not None:
        d.finish_reason, d.usage, d.seed = finish, Usage(3, 2), 5
    return d


async def good() -> Deltas:
    yield delta("Hel", 1)
    yield delta("lo", 2, FinishReason.LENGTH)


async def broken() -> Deltas:
    yield delta("Hel", 1)
    raise ModelError("the model failed")


class Stream:
    """A delta stream for the plane's ``Generation``: what an async generator yields."""

    def __init__(self, deltas: Deltas) -> None:
        self.deltas, self.cancelled = deltas, False

    def __aiter__(self) -> Stream:
        return self

    async def __anext__(self) -> GenerateDelta:
        return await self.deltas.__anext__()

    def cancel(self) -> None:
        self.cancelled = True


def framed(framer: Framer, deltas: Deltas) -> AsyncIterator[bytes]:
    """The reply's chunks, as a family's streamed reply makes them."""
    mv = ModelVersion("m", "1", "llm")
    generation = Generation(
        mv, Stream(deltas), 1, family="test", split=None, series=None, start=0, timeout_s=0
    )
    return frames(framer, generation)


def drain(chunks: AsyncIterator[bytes]) -> list[bytes]:
    """The chunks; SSE ones one event each (a chunk may hold two: usage, then [DONE])."""

    async def go() -> list[bytes]:
        return [f async for f in chunks]

    got = asyncio.run(go())
    if not all(c.startswith(b"data:") for c in got):
        return got
    return [e + b"\n\n" for e in b"".join(got).split(b"\n\n")[:-1]]


def oa_request(stream: bool = True) -> OpenAIRequest:
    return OpenAIRequest("m", GenerateRequest(stream=stream), include_usage=True)


def tgi_req() -> object:
    return tgi_request({"inputs": "x", "parameters": {"details": True}}, 4, stream=True)


FRAMERS: dict[str, Callable[[], Framer]] = {
    "openai-chat": lambda: openai.ChatFramer(Reply("chat", "m"), oa_request()),
    "openai-text": lambda: openai.TextFramer(Reply("text", "m"), oa_request(), ""),
    "tgi": lambda: tgi.TgiFramer(tgi_req(), "", frozenset()),  # type: ignore[arg-type]
    "vllm": lambda: vllm.CumulativeFramer("P", 1),
    "vllm-mindie": lambda: vllm.DeltaFramer(1),
    "triton": lambda: triton.TritonFramer(triton.Reply({}, "m", "1", False)),
    "mindie": lambda: mindie.MindieFramer(False, None),
}
FORMATTERS: dict[str, Callable[[Callable[[], Deltas]], AsyncIterator[bytes]]] = {
    name: (lambda d, make=make: framed(make(), d())) for name, make in FRAMERS.items()
}


def test_openai_chat_stream_framing() -> None:
    frames = drain(FORMATTERS["openai-chat"](good))
    assert all(f.startswith(b"data: ") and f.endswith(b"\n\n") for f in frames)
    assert frames[-1] == b"data: [DONE]\n\n"
    docs = [orjson.loads(f[6:]) for f in frames[:-1]]
    assert docs[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert [d["choices"][0]["delta"].get("content") for d in docs[1:3]] == ["Hel", "lo"]
    assert docs[2]["choices"][0]["finish_reason"] == "length"
    assert docs[3] == {**docs[3], "choices": [], "usage": {"prompt_tokens": 3,
                       "completion_tokens": 2, "total_tokens": 5}}  # fmt: skip
    assert all(d["usage"] is None for d in docs[:3])


def test_tgi_stream_framing() -> None:
    frames = drain(FORMATTERS["tgi"](good))
    assert all(f.startswith(b"data:{") and f.endswith(b"}\n\n") for f in frames)
    first, last = (orjson.loads(f[5:]) for f in frames)
    assert first["index"] == 1
    assert first["generated_text"] is None
    assert first["details"] is None
    assert last["generated_text"] == "Hello"
    assert last["details"] == {"finish_reason": "length", "generated_tokens": 2, "seed": None,
                               "input_length": 3}  # fmt: skip


def test_vllm_stream_framings() -> None:
    assert drain(FORMATTERS["vllm"](good)) == [b'{"text":["PHel"]}\n', b'{"text":["PHello"]}\n']
    assert drain(FORMATTERS["vllm-mindie"](good)) == [b'{"text":["Hel"]}\0', b'{"text":["lo"]}\0']


def test_triton_and_mindie_stream_framing() -> None:
    assert drain(FORMATTERS["triton"](good)) == [
        b'data:{"model_name":"m","model_version":"1","text_output":"Hel"}\n\n',
        b'data:{"model_name":"m","model_version":"1","text_output":"lo"}\n\n',
    ]
    first, last = drain(FORMATTERS["mindie"](good))
    assert first.startswith(b"data: {")
    assert last.startswith(b"data: {")
    assert orjson.loads(first[6:])["token"] == {"id": 1, "text": "Hel"}
    end = orjson.loads(last[6:])
    assert (end["generated_text"], end["details"]) == ("Hello", None)
    assert end["token"] == {"id": 2, "text": None}


OPENAI_ERROR = (
    b'data: {"error":{"message":"the model failed","type":"server_error","param":null,'
    b'"code":null}}\n\n'
)
ERROR_FRAMES = {
    "openai-chat": OPENAI_ERROR,
    "openai-text": OPENAI_ERROR,
    "tgi": b'data:{"error":"the model failed","error_type":"generation"}\n\n',
    "vllm": b'{"error":"the model failed"}\n',
    "vllm-mindie": b'{"error":"the model failed"}\0',
    "triton": b'data:{"error":"the model failed"}\n\n',
    "mindie": b'data: {"error":"the model failed","error_type":"Incomplete Generation"}\n\n',
}  # fmt: skip


@pytest.mark.parametrize("family", FORMATTERS)
def test_an_error_after_the_stream_began_is_an_error_frame(family: str) -> None:
    frames = drain(FORMATTERS[family](broken))
    if family.startswith("openai"):
        assert frames[-1] == b"data: [DONE]\n\n"
        frames = frames[:-1]
    assert frames[-1] == ERROR_FRAMES[family]
    assert len(frames) >= 2  # the token before the error went out first


def test_sampling_rules_of_tgi_style_parameters() -> None:
    greedy = tgi_request({"inputs": "x"}, 4).generate.sampling
    assert greedy.temperature == 0.0
    assert greedy.max_new_tokens is None
    assert greedy.default_max_new_tokens == 100
    warped = tgi_request({"inputs": "x", "parameters": {"top_k": 5}}, 4).generate.sampling
    assert warped.temperature == 1.0
    assert warped.top_k == 5
    hot = tgi_request({"inputs": "x", "parameters": {"temperature": 0.5}}, 4).generate.sampling
    assert hot.temperature == 0.5
    assert SamplingParams().greedy is False
