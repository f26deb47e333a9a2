"""The generation plane's per-request duties without a server: in flight while it runs, the
work cancelled when the reply is dropped, the request timeout, the queue limit, what the
metrics observer is told; a prompt that cannot fit refused before it is tokenized, and long
prompts and chats made ready off the event loop."""

from __future__ import annotations

import asyncio
import threading
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
from rosettaserve.core.generation_plane import (
    INLINE_CHAT_BYTES,
    INLINE_PROMPT_CHARS,
    Generation,
    GenerationPlane,
    can_serve,
    chat_prompt,
    frames,
)
from rosettaserve.core.registry import ModelVersion
from rosettaserve.core.structured_output import regex
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


class Tokenizing(Generator):
    """Records the prompts it tokenizes and on which thread; generates nothing."""

    info = GeneratorInfo("m", 64, 1, max_num_seqs=2, max_waiting=8, max_stop_sequences=4,
                         dtype="float32", device="cpu", max_prompt_chars=2000)  # fmt: skip

    def __init__(self) -> None:
        self.mv = ModelVersion("m", "1", "llm")
        self.inflight: list[int] = []  # the version's requests in flight, seen while tokenizing
        self.tokenized: list[tuple[str, str]] = []
        self.generated: list[GenerateRequest] = []
        self.chats: list[str] = []

    def tokenize(self, text: str, special: bool = True) -> list[int]:
        self.tokenized.append((text, threading.current_thread().name))
        self.inflight.append(self.mv.inflight)
        return [1] * (len(text) // 100)

    def generate(self, request: Any) -> Endless:
        self.generated.append(request)
        return Endless(finish_after=1)

    def chat_prompt(self, messages: list[dict[str, Any]], chat: Any = None) -> str:
        self.chats.append(threading.current_thread().name)
        return "".join(m["content"] for m in messages)


def started(request: GenerateRequest) -> tuple[Tokenizing, str]:
    plane = GenerationPlane(DataPlane(registry=None, limits=Limits()))  # type: ignore[arg-type]
    gen = Tokenizing()

    async def main() -> str:
        generation = await plane.generate("vllm", gen.mv, gen, request)  # type: ignore[arg-type]
        generation.close()
        return threading.current_thread().name

    return gen, asyncio.run(main())


def test_a_prompt_too_long_for_the_window_is_refused_before_it_is_tokenized() -> None:
    request = GenerateRequest(prompt="x" * 2001)
    with pytest.raises(InvalidInput, match=r"2001 characters; .* at most 2000 characters") as err:
        started(request)
    assert err.value.http_status == 400


def test_a_long_prompt_is_tokenized_off_the_loop_and_handed_as_ids() -> None:
    text = "y" * (INLINE_PROMPT_CHARS + 1)
    request = GenerateRequest(prompt=text, add_special_tokens=False)
    gen, loop_thread = started(request)
    ((tokenized, thread),) = gen.tokenized
    assert tokenized == text
    assert thread != loop_thread
    assert thread.startswith("model-request-work")
    assert gen.generated[0].prompt_token_ids == [1] * (len(text) // 100)
    assert gen.inflight == [1]  # counted in flight meanwhile: unloading waits for it
    assert gen.mv.inflight == 0


def test_a_short_prompt_is_left_to_the_engine() -> None:
    gen, _ = started(GenerateRequest(prompt="z" * INLINE_PROMPT_CHARS))
    assert gen.tokenized == []
    assert gen.generated[0].prompt_token_ids is None
    ids = GenerateRequest(prompt="w" * 5000, prompt_token_ids=[5, 6])  # ids given: nothing done
    gen, _ = started(ids)
    assert gen.tokenized == []


def test_a_large_chat_is_rendered_off_the_loop() -> None:
    gen = Tokenizing()
    messages = [{"role": "user", "content": "hi"}]

    async def main() -> str:
        assert await chat_prompt(gen, messages, INLINE_CHAT_BYTES) == "hi"
        assert await chat_prompt(gen, messages, INLINE_CHAT_BYTES + 1) == "hi"
        return threading.current_thread().name

    loop_thread = asyncio.run(main())
    assert gen.chats[0] == loop_thread
    assert gen.chats[1].startswith("model-request-work")


def test_structured_outputs_pass_on_both_engines_split_or_not() -> None:
    """Nothing refuses them: the built-in engine replays the tokens into its matcher, and a
    vLLM prefill instance serves a constrained request whole (pd/prefill.py), since vLLM's
    grammar cannot start past P's token."""
    asked = GenerateRequest(sampling=SamplingParams(constraint=regex("[a-z]+", "r")))
    for runtime in ("vllm", "llm"):
        for split in (None, object()):
            mv = ModelVersion("m", "1", runtime)
            can_serve(mv, Generator(), asked, split)  # type: ignore[arg-type]
