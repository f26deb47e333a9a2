"""The generation engine on the tiny example model: batching, sampling, stopping, limits."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Coroutine
from typing import Any, TypeVar

import pytest

from rosettaserve.core.errors import InvalidInput, ModelError, Overloaded
from rosettaserve.core.generate import (
    Completion,
    FinishReason,
    GenerateDelta,
    GenerateRequest,
    SamplingParams,
    collect,
)
from rosettaserve.runtimes.llm import LlmModel
from tests.llmmodel import load_llm

PROMPTS = [
    "The quick brown",
    "Once upon a time",
    "你好",
    "In the café on the corner",
    "Numbers are friends:",
    "hi",
    "The weather today",
    "Every morning the baker",
]
T = TypeVar("T")


def run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coro)


def greedy(prompt: str, max_new: int = 24, **kw: Any) -> GenerateRequest:
    params = SamplingParams(max_new_tokens=max_new, temperature=0.0, **kw)
    return GenerateRequest(prompt=prompt, sampling=params)


def sampled(prompt: str, seed: int, max_new: int = 24, **kw: Any) -> GenerateRequest:
    params = SamplingParams(max_new_tokens=max_new, temperature=1.5, seed=seed, **kw)
    return GenerateRequest(prompt=prompt, sampling=params)


async def one(llm: LlmModel, request: GenerateRequest) -> Completion:
    (done,) = await collect(llm.generate(request))
    return done


async def deltas(llm: LlmModel, request: GenerateRequest) -> list[GenerateDelta]:
    return [d async for d in llm.generate(request)]


# -- continuous batching -------------------------------------------------------------------------


async def staggered(llm: LlmModel, requests: list[GenerateRequest]) -> list[Completion]:
    """Each request joins after the previous one produced two tokens: they join a running batch,
    and (with different lengths) leave it while others go on."""
    tasks = []
    for request in requests:
        started = asyncio.Event()

        async def consume(
            request: GenerateRequest = request, started: asyncio.Event = started
        ) -> Completion:
            done = Completion(0)
            async for delta in llm.generate(request):
                done.add(delta)
                if len(done.token_ids) >= 2:
                    started.set()
            started.set()
            return done

        tasks.append(asyncio.create_task(consume()))
        await started.wait()
    return list(await asyncio.gather(*tasks))


def test_greedy_tokens_are_the_same_alone_and_in_a_batch(llm: LlmModel) -> None:
    requests = [greedy(p, max_new=16 + 4 * i, ignore_eos=True) for i, p in enumerate(PROMPTS)]
    alone = [run(one(llm, r)) for r in requests]
    peak_before = llm.engine.stats.peak_batch
    together = run(staggered(llm, requests))
    assert llm.engine.stats.peak_batch >= max(4, peak_before)  # they really shared steps
    assert [c.token_ids for c in together] == [c.token_ids for c in alone]
    assert [c.text for c in together] == [c.text for c in alone]
    assert [len(c.token_ids) for c in alone] == [16 + 4 * i for i in range(len(PROMPTS))]


def test_seeded_sampling_is_the_same_alone_and_in_a_batch(llm: LlmModel) -> None:
    requests = [sampled(p, seed=100 + i, top_p=0.9, top_k=50) for i, p in enumerate(PROMPTS)]
    alone = [run(one(llm, r)) for r in requests]
    together = run(staggered(llm, requests))
    assert [c.token_ids for c in together] == [c.token_ids for c in alone]
    assert all(c.seed == 100 + i for i, c in enumerate(alone))


def test_a_seed_decides_the_sample(llm: LlmModel) -> None:
    first = run(one(llm, sampled("Once upon a time", seed=7, max_new=32)))
    again = run(one(llm, sampled("Once upon a time", seed=7, max_new=32)))
    others = [run(one(llm, sampled("Once upon a time", seed=s, max_new=32))) for s in range(8, 14)]
    assert first.token_ids == again.token_ids
    assert any(o.token_ids != first.token_ids for o in others)


def test_n_sequences_use_consecutive_seeds(llm: LlmModel) -> None:
    request = sampled("The weather today", seed=40)
    request.n = 3

    async def three() -> list[Completion]:
        return await collect(llm.generate(request), 3)

    done = run(three())
    singles = [run(one(llm, sampled("The weather today", seed=40 + i))) for i in range(3)]
    assert [c.token_ids for c in done] == [c.token_ids for c in singles]
    assert [c.index for c in done] == [0, 1, 2]


# -- stopping ------------------------------------------------------------------------------------


def test_stop_strings_end_the_text_before_them(llm: LlmModel) -> None:
    full = run(one(llm, greedy("The quick brown", max_new=40, ignore_eos=True))).text
    stop = full[20:26]
    cut = full.index(stop)
    parts = run(deltas(llm, greedy("The quick brown", max_new=40, stop=(stop, "never here"))))
    text = "".join(d.text for d in parts)
    assert text == full[:cut]
    assert parts[-1].finish_reason is FinishReason.STOP
    assert parts[-1].stop_reason == stop
    assert all(stop not in d.text for d in parts)
    kept = run(
        one(
            llm,
            greedy("The quick brown", max_new=40, stop=(stop,), include_stop_str_in_output=True),
        )
    )
    assert kept.text == full[: cut + len(stop)]


def test_stop_token_ids_end_the_sequence(llm: LlmModel) -> None:
    full = run(one(llm, greedy("Once upon a time", max_new=20, ignore_eos=True)))
    target = full.token_ids[6]
    first = full.token_ids.index(target)
    done = run(one(llm, greedy("Once upon a time", max_new=20, stop_token_ids=(target,))))
    assert done.token_ids == full.token_ids[: first + 1]
    assert done.finish_reason is FinishReason.STOP
    assert done.stop_reason == target


def test_length_and_end_of_sequence(llm: LlmModel) -> None:
    capped = run(one(llm, greedy("Once upon a time", max_new=3)))
    assert capped.finish_reason is FinishReason.LENGTH
    assert len(capped.token_ids) == 3
    assert capped.usage is not None
    assert capped.usage.completion_tokens == 3
    free = run(one(llm, greedy("Once upon a time", max_new=200)))
    assert free.finish_reason is FinishReason.EOS  # the tiny model learned to end this sentence
    assert free.token_ids[-1] in llm.engine.eos_ids
    assert "<|" not in free.text


# -- penalties and logprobs ----------------------------------------------------------------------


def test_penalties_change_a_repetitive_output(llm: LlmModel) -> None:
    prompt = "The cat sat on the mat. The dog sat on the log."
    plain = run(one(llm, greedy(prompt, max_new=100, ignore_eos=True)))
    for penalty in (
        {"repetition_penalty": 3.0},
        {"presence_penalty": 2.0},
        {"frequency_penalty": 2.0},
    ):
        penalized = run(one(llm, greedy(prompt, max_new=100, ignore_eos=True, **penalty)))
        assert penalized.token_ids != plain.token_ids, penalty
        counts = len(set(penalized.token_ids))
        assert counts >= len(set(plain.token_ids)), penalty  # fewer repeats, more distinct tokens


def test_logprobs_of_greedy_tokens_are_the_top_choice(llm: LlmModel) -> None:
    done = run(one(llm, greedy("The quick brown", max_new=8, logprobs=True, top_logprobs=3)))
    assert len(done.logprobs) == 8
    for token_id, lp in zip(done.token_ids, done.logprobs, strict=True):
        assert lp.token_id == token_id
        assert lp.logprob <= 0.0
        assert len(lp.top) == 3
        assert lp.top[0].token_id == token_id
        assert lp.top[0].logprob == pytest.approx(lp.logprob)
        assert [t.logprob for t in lp.top] == sorted((t.logprob for t in lp.top), reverse=True)


# -- streaming text ------------------------------------------------------------------------------


def test_streamed_text_never_splits_a_character(llm: LlmModel) -> None:
    tokenizer = llm.tokenizer
    for prompt in PROMPTS:
        parts = run(deltas(llm, greedy(prompt, max_new=40)))
        ids = [t for d in parts for t in d.token_ids]
        # only a length cut in the middle of a character leaves U+FFFD, as decode() does
        assert all("\ufffd" not in d.text for d in parts[:-1]), prompt
        assert "".join(d.text for d in parts) == tokenizer.decode(ids, skip_special_tokens=True)


def test_prompts_tokenize_as_calling_the_tokenizer_does(llm: LlmModel) -> None:
    tokenizer = llm.tokenizer
    special = " ".join(str(t) for t in tokenizer.all_special_tokens)
    texts = [*PROMPTS, "", "  two  spaces ", f"text {special} around", "tab\tand\nnewline"]
    for text in texts:
        for add in (True, False):
            want = list(tokenizer(text, add_special_tokens=add)["input_ids"])
            assert llm.engine.tokenize(text, add) == want, (text, add)


# -- validation, limits, cancellation ------------------------------------------------------------


def test_requests_that_cannot_fit_are_refused(llm: LlmModel) -> None:
    async def check() -> None:
        with pytest.raises(InvalidInput, match="context window"):
            llm.generate(greedy("word " * 600))
        with pytest.raises(InvalidInput, match="at most"):
            llm.generate(greedy("The quick brown", max_new=10_000))
        with pytest.raises(InvalidInput, match="n must be"):
            llm.generate(GenerateRequest(prompt="hi", n=99))
        with pytest.raises(InvalidInput, match="out of range"):
            llm.generate(GenerateRequest(prompt_token_ids=[1, 10**6]))
        with pytest.raises(InvalidInput, match="empty"):
            llm.generate(GenerateRequest(prompt=""))

    run(check())
    assert llm.engine.active == 0


def wait_until(condition: Any, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def test_queue_limit_refuses_instead_of_queueing() -> None:
    llm = load_llm(max_num_seqs=1, max_waiting=1, max_model_len=100_000)
    try:

        async def check() -> None:
            long = llm.generate(greedy("Once upon", max_new=50_000, ignore_eos=True))
            await long.__anext__()  # running
            queued = llm.generate(greedy("The quick brown", max_new=4))
            with pytest.raises(Overloaded):
                llm.generate(greedy("hi", max_new=4))
            long.cancel()
            (done,) = await collect(queued)  # the queued one gets the freed slot
            assert len(done.token_ids) == 4

        run(check())
        wait_until(lambda: llm.engine.active == 0)
        assert llm.engine.stats.cancelled == 1
    finally:
        llm.unload()


def test_a_cancelled_consumer_frees_its_slot(llm: LlmModel) -> None:
    async def abandon() -> None:
        async def consume() -> None:
            async for _ in llm.generate(greedy("Once upon", max_new=400, ignore_eos=True)):
                pass

        task = asyncio.create_task(consume())
        while llm.engine.stats.tokens < 3:
            await asyncio.sleep(0.001)
        task.cancel()  # what the HTTP server does when the client disconnects
        with pytest.raises(asyncio.CancelledError):
            await task

    before = llm.engine.stats.tokens
    run(abandon())
    wait_until(lambda: llm.engine.active == 0)
    produced = llm.engine.stats.tokens - before
    time.sleep(0.05)
    assert llm.engine.stats.tokens - before == produced  # no more work for it
    assert produced < 400


def test_a_dropped_stream_is_dropped_by_the_engine(llm: LlmModel) -> None:
    async def drop() -> None:
        stream = llm.generate(greedy("Once upon", max_new=400, ignore_eos=True))
        await stream.__anext__()
        del stream

    run(drop())
    wait_until(lambda: llm.engine.active == 0)


# -- prefill and decode apart (what prefill/decode disaggregation builds on) -------------------


def test_a_prefilled_cache_decodes_elsewhere_to_the_same_tokens(llm: LlmModel) -> None:
    from rosettaserve.runtimes.llm.batch import DecodeBatch

    engine = llm.engine
    expected = run(one(llm, greedy("Once upon a time", max_new=12, ignore_eos=True))).token_ids
    prompt = engine.tokenize("Once upon a time")
    logits, kv = engine.runner.prefill(prompt)  # the "prefill instance"
    shipped = [(k.clone(), v.clone()) for k, v in kv]
    other_logits, other_kv = engine.runner.prefill(engine.tokenize("你好"))
    batch = DecodeBatch(engine.runner)  # the "decode instance", with a neighbour of its own
    batch.join([other_kv, shipped])
    assert [k.shape[2] for k, _ in batch.row_kv(1)] == [len(prompt)] * len(kv)
    tokens = [int(other_logits.argmax()), int(logits.argmax())]
    produced = [tokens[1]]
    for _ in range(11):
        step = batch.step(tokens)
        tokens = [int(t) for t in step.argmax(dim=-1)]
        produced.append(tokens[1])
    assert produced == expected
    assert [k.shape[2] for k, _ in batch.row_kv(1)] == [len(prompt) + 11] * len(kv)


# -- a request whose sampling fails, beside others -------------------------------------------------
# The readers (core/sampling_fields.py) refuse or tame every value a client can send; these
# parameters go around them, as a model's NaN logits would: the engine's last line of defence.


def poisoned(prompt: str, n: int = 1, **kw: Any) -> GenerateRequest:
    request = sampled(prompt, seed=1, max_new=30, ignore_eos=True, **kw)
    request.n = n
    return request


FIRST_TOKEN = {"repetition_penalty": 1e-300}  # a seen token's logit / 0.0: +inf at once
THIRD_TOKEN = {"frequency_penalty": -3e38}  # +inf once a token is twice out


async def beside(
    llm: LlmModel, neighbours: list[GenerateRequest], attacker: GenerateRequest
) -> tuple[list[Completion], Completion, BaseException | None]:
    """The neighbours run; once each has produced two tokens, the attacker joins them."""
    running = [asyncio.create_task(one(llm, r)) for r in neighbours]
    while llm.engine.stats.decode_steps == 0 or llm.engine.stats.running < len(neighbours):
        await asyncio.sleep(0.001)
    got = Completion(0)
    error: BaseException | None = None
    try:
        async for delta in llm.generate(attacker):
            got.add(delta)
    except Exception as exc:
        error = exc
    return list(await asyncio.gather(*running)), got, error


NEIGHBOURS = [
    greedy("The quick brown", max_new=40, ignore_eos=True),
    sampled("Once upon a time", seed=11, max_new=40, ignore_eos=True, top_p=0.9),
]


@pytest.mark.parametrize(("poison", "n"), [(FIRST_TOKEN, 1), (THIRD_TOKEN, 1), (THIRD_TOKEN, 2)])
def test_a_row_whose_sampling_fails_ends_its_request_only(
    llm: LlmModel, poison: dict[str, float], n: int
) -> None:
    alone = [run(one(llm, r)) for r in NEIGHBOURS]
    together, got, error = run(beside(llm, NEIGHBOURS, poisoned("hi", n, **poison)))
    assert isinstance(error, ModelError)
    assert "sampling failed" in error.message
    assert [c.token_ids for c in together] == [c.token_ids for c in alone]
    if poison is THIRD_TOKEN:  # it failed in a decode step it shared with the neighbours
        assert len(got.token_ids) >= 2
    wait_until(lambda: llm.engine.active == 0)  # none of its sequences is left decoding
    assert run(one(llm, NEIGHBOURS[0])).token_ids == alone[0].token_ids
