"""The generation plane's per-request duties without a server: in flight while it runs, the
work cancelled when the reply is dropped, the request timeout, the queue limit, what the
metrics observer is told."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import Any

import pytest

from rosettaserve.core.dataplane import DataPlane, Limits
from rosettaserve.core.errors import DeadlineExceeded, InvalidInput, Overloaded
from rosettaserve.core.generate import (
    FinishReason,
    GenerateDelta,
    GenerateRequest,
    GeneratorInfo,
    SamplingParams,
    Usage,
)
from rosettaserve.core.generation_plane import Generation, GenerationPlane, can_serve, frames
from rosettaserve.core.registry import ModelVersion
from rosettaserve.protocols.vllm.rest import CumulativeFramer


class Endless:
    """A stream that yields a token every few milliseconds and never ends by itself."""

    def __init__(self, finish_after: int | None = None) -> None:
        self.cancelled, self.count, self.finish_after = False, 0, finish_after

    def __aiter__(self) -> Endless:
        return self

    async def __anext__(self) -> GenerateDelta:
        await asyncio.sleep(0.001)
        self.count += 1
        delta = GenerateDelta(0, "x", [self.count], [False])
        if self.count == self.finish_after:
            delta.finish_reason, delta.usage = FinishReason.LENGTH, Usage(3, self.count)
        return delta

    def cancel(self) -> None:
        self.cancelled = True


class Series:
    def __init__(self) -> None:
        self.first: list[int] = []
        self.gaps: list[int] = []
        self.ends: list[tuple[str, str, int, int]] = []

    def first_token(self, ns: int) -> None:
        self.first.append(ns)

    def inter_token(self, ns: int) -> None:
        self.gaps.append(ns)

    def finished(self, family: str, outcome: str, **kw: int) -> None:
        self.ends.append((family, outcome, kw["prompt_tokens"], kw["tokens"]))


def generation(stream: Endless, series: Series, timeout_s: float = 0) -> Generation:
    mv = ModelVersion("m", "1", "llm")
    return Generation(
        mv, stream, 1, family="vllm", split=None, series=series, start=0, timeout_s=timeout_s
    )


def test_a_finished_request_is_timed_counted_and_leaves() -> None:
    series, stream = Series(), Endless(finish_after=3)
    g = generation(stream, series)
    assert g.mv.inflight == 1
    (done,) = asyncio.run(g.collect())
    assert done.text == "xxx"
    assert g.mv.inflight == 0
    assert (len(series.first), len(series.gaps)) == (1, 2)
    assert series.ends == [("vllm", "success", 3, 3)]


def test_a_dropped_stream_cancels_the_work() -> None:
    series, stream = Series(), Endless()
    g = generation(stream, series)

    async def run() -> bytes:
        chunks = frames(CumulativeFramer("p", 1), g)
        first = await chunks.__anext__()
        await chunks.aclose()  # the client went away
        return first

    assert asyncio.run(run()) == b'{"text":["px"]}\n'
    assert stream.cancelled
    assert g.mv.inflight == 0
    assert series.ends == [("vllm", "cancelled", 0, 1)]


def test_the_request_timeout_ends_the_generation() -> None:
    series, stream = Series(), Endless()
    g = generation(stream, series, timeout_s=0.05)
    with pytest.raises(DeadlineExceeded) as caught:
        asyncio.run(asyncio.wait_for(g.collect(), 30))
    assert "request timeout of 50 ms" in caught.value.message
    assert stream.cancelled
    assert g.mv.inflight == 0
    assert series.ends[0][1] == "deadline_exceeded"


class Generator:
    info = GeneratorInfo("m", 64, 1, max_num_seqs=2, max_waiting=8, max_stop_sequences=4,
                         dtype="float32", device="cpu")  # fmt: skip

    def generate(self, request: Any) -> Endless:
        return Endless()


def test_the_queue_limit_counts_requests_beyond_the_running_ones() -> None:
    plane = GenerationPlane(DataPlane(registry=None, limits=Limits(max_queue_size=2)))  # type: ignore[arg-type]
    mv = ModelVersion("m", "1", "llm")
    mv.inflight = 3  # two running, one waiting
    plane.admit(mv, Generator())  # type: ignore[arg-type]
    mv.inflight = 4  # two waiting: the limit
    with pytest.raises(Overloaded) as caught:
        plane.admit(mv, Generator())  # type: ignore[arg-type]
    assert caught.value.headers == {"retry-after": "1"}
    mv.max_queue_size = 0  # model.yaml's own: no limit
    plane.admit(mv, Generator())  # type: ignore[arg-type]


def test_prompt_logprobs_are_refused_where_the_engine_would_not_compute_them() -> None:
    """Asked of the built-in engine (which computes the logits of a prompt's last token only),
    or across prefill/decode instances (the hand-over does not carry them): a 400, not an
    answer without them. An engine that computes them (vLLM's) gets the request."""
    mv = ModelVersion("m", "1", "llm")
    asked = GenerateRequest(sampling=SamplingParams(prompt_logprobs=1))
    builtin, vllm = Generator(), Generator()
    vllm.info = replace(vllm.info, prompt_logprobs=True)
    for generator, split in ((builtin, None), (vllm, object())):
        with pytest.raises(InvalidInput, match="'prompt_logprobs' is not supported"):
            can_serve(mv, generator, asked, split)  # type: ignore[arg-type]
    can_serve(mv, vllm, asked, None)  # type: ignore[arg-type]
    for generator, split in ((builtin, None), (builtin, object())):
        can_serve(mv, generator, GenerateRequest(), split)  # type: ignore[arg-type]
