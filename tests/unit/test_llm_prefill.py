"""Batched prefill, chunked prefill and the prefix cache on the tiny example model: greedy
output stays what transformers' own ``generate`` gives, prompts share passes, a long prompt is
prefilled a chunk per engine step between decode steps, a shared prefix is computed once."""

from __future__ import annotations

import asyncio
import itertools
import logging
import random
import sys
import warnings
from typing import Any

import pytest
import torch

from rosettaserve.core.generate import (
    Completion,
    GenerateDelta,
    GenerateRequest,
    SamplingParams,
    collect,
)
from rosettaserve.runtimes.llm import LlmModel, padded, rows
from rosettaserve.runtimes.llm import engine as engine_module
from rosettaserve.runtimes.llm.batch import DecodeBatch
from rosettaserve.runtimes.llm.engine import Engine
from rosettaserve.runtimes.llm.prefill import PrefillJob, plan, run
from rosettaserve.runtimes.llm.prefix_cache import PrefixCache
from rosettaserve.runtimes.llm.resume import Handoff, Resume
from tests.conftest import EXAMPLES
from tests.llmmodel import held_engine
from tests.unit.test_pd_engine import split_run, whole

WORDS = (EXAMPLES.parent / "llm" / "corpus.txt").read_text(encoding="utf-8").split()
SYSTEM = " ".join(WORDS[40:120])  # a shared preamble of well over four 16-token blocks


def prompts(count: int, seed: int, lengths: tuple[int, ...]) -> list[str]:
    """Prompts of various lengths (in words) from the bundled text; every third one starts
    with the shared preamble."""
    rng = random.Random(seed)
    out = []
    for i in range(count):
        n = rng.choice(lengths)
        start = rng.randrange(0, len(WORDS) - n)
        text = " ".join(WORDS[start : start + n])
        out.append(f"{SYSTEM} {text}" if i % 3 == 0 else text)
    return out


def greedy(prompt: str, max_new: int = 16, **options: Any) -> GenerateRequest:
    params = SamplingParams(max_new_tokens=max_new, temperature=0.0, **options)
    return GenerateRequest(prompt=prompt, sampling=params)


def reference(llm: LlmModel, prompt: str, max_new: int = 16) -> list[int]:
    """What transformers' own greedy ``generate`` gives for the prompt alone."""
    ids = llm.engine.tokenize(prompt)
    with torch.inference_mode():
        out = llm.engine.runner.model.generate(
            input_ids=torch.tensor([ids]),
            attention_mask=torch.ones(1, len(ids), dtype=torch.long),
            max_new_tokens=max_new,
            do_sample=False,
            pad_token_id=0,
        )
    return [int(t) for t in out[0, len(ids) :]]


def all_at_once(llm: LlmModel, requests: list[GenerateRequest]) -> list[Completion]:
    """Submit everything before the engine thread starts: its first admission takes it all."""

    async def scenario() -> list[Completion]:
        streams = [llm.engine.generate(r) for r in requests]
        llm.engine.start()
        done = await asyncio.gather(*(collect(s) for s in streams))
        return [c for (c,) in done]

    return asyncio.run(scenario())


def passes(patch: pytest.MonkeyPatch, engine: Engine) -> list[tuple[list[int], int, int]]:
    """Record each prefill pass: its chunk lengths, the rows decoding and the decode steps so
    far (read in the engine thread, before the pass)."""
    seen: list[tuple[list[int], int, int]] = []
    real = engine_module.run

    def record(runner: Any, chunks: list[tuple[PrefillJob, int]]) -> list[Any]:
        seen.append(([take for _, take in chunks], engine.batch.size, engine.stats.decode_steps))
        return real(runner, chunks)

    patch.setattr(engine_module, "run", record)
    return seen


@pytest.mark.parametrize("seed", [0, 1])
def test_prompts_admitted_together_share_passes_and_match_generate(seed: int) -> None:
    texts = prompts(24, seed, (1, 2, 3, 5, 8, 13, 30))
    with held_engine(prefix_cache_tokens=0) as llm:
        done = all_at_once(llm, [greedy(t) for t in texts])
        stats = llm.engine.stats
        assert stats.prefills == len(texts)
        assert stats.prefill_steps <= len(texts) // 3  # several prompts per pass
        for text, completion in zip(texts, done, strict=True):
            assert completion.token_ids == reference(llm, text), text


def test_long_prompts_are_chunked_between_decode_steps_and_match_generate() -> None:
    long_texts = [f"{SYSTEM} {' '.join(WORDS[i : i + 90])}" for i in (0, 150)]
    with pytest.MonkeyPatch.context() as patch, held_engine(prefill_chunk_tokens=32) as llm:
        engine = llm.engine
        seen = passes(patch, engine)

        async def scenario() -> tuple[Completion, list[Completion]]:
            running = engine.generate(greedy("Once upon a time", 300, ignore_eos=True))
            engine.start()
            first = await running.__anext__()  # it decodes while the long prompts arrive
            longs = [engine.generate(greedy(t)) for t in long_texts]
            done = await asyncio.gather(*(collect(s) for s in longs))
            (rest,) = await collect(running)
            rest.token_ids.insert(0, first.token_ids[0])
            return rest, [c for (c,) in done]

        short, done = asyncio.run(scenario())
        lengths = [len(engine.tokenize(t)) for t in long_texts]
        assert all(n > 150 for n in lengths)
        assert all(sum(takes) <= 32 for takes, _, _ in seen)
        long_passes = [(rows, steps) for takes, rows, steps in seen[1:]]
        assert len(long_passes) >= sum(lengths) // 32
        assert all(rows >= 1 for rows, _ in long_passes)  # the short one kept decoding
        steps = [s for _, s in long_passes]
        assert all(b == a + 1 for a, b in itertools.pairwise(steps))  # one step each
        for text, completion in zip(long_texts, done, strict=True):
            assert completion.token_ids == reference(llm, text)
        alone = reference(llm, "Once upon a time", 300)  # it stops at its end-of-sequence token
        assert short.token_ids[: len(alone)] == alone


def test_requests_arriving_while_an_idle_engine_prefills_come_before_its_first_decode() -> None:
    texts = prompts(7, 2, (2, 5, 8))
    with pytest.MonkeyPatch.context() as patch, held_engine(prefix_cache_tokens=0) as llm:
        engine = llm.engine
        seen = passes(patch, engine)
        held: list[Any] = []  # submitted requests kept out of the queue until they "arrive"
        recorded = engine_module.run

        def arrive(runner: Any, chunks: list[tuple[PrefillJob, int]]) -> list[Any]:
            out = recorded(runner, chunks)
            if held:  # one more request arrives during each pass
                with engine._cond:
                    engine._waiting.append(held.pop(0))
            return out

        patch.setattr(engine_module, "run", arrive)

        async def scenario() -> list[Completion]:
            streams = [engine.generate(greedy(t)) for t in texts]
            with engine._cond:
                while len(engine._waiting) > 1:
                    held.append(engine._waiting.pop())
            held.reverse()
            engine.start()
            gathered = asyncio.gather(*(collect(s) for s in streams))
            done = await asyncio.wait_for(gathered, 120)  # a lost request would hang
            return [c for (c,) in done]

        done = asyncio.run(scenario())
        burst = engine_module.FRESH_PREFILL_PASSES
        assert [steps for _, _, steps in seen[:burst]] == [0] * burst  # before any decode
        assert seen[burst][2] == 1  # a burst's passes are bounded: the next one decoded first
        assert engine.stats.prefills == len(texts)  # none was lost
        for text, completion in zip(texts, done, strict=True):
            assert completion.token_ids == reference(llm, text), text


def test_a_shared_prefix_is_computed_once_and_outputs_match_generate() -> None:
    texts = prompts(9, 3, (2, 7, 20))
    with held_engine(prefill_chunk_tokens=64) as llm:
        engine = llm.engine
        engine.start()
        outputs = [asyncio.run(whole(llm, greedy(t))).token_ids for t in texts]
        blocks = (len(engine.tokenize(SYSTEM)) - 1) // 16
        sharing = len([t for t in texts if t.startswith(SYSTEM)])
        assert sharing >= 3
        assert engine.stats.prefix_hit_tokens >= (sharing - 1) * blocks * 16
        assert engine.prefix_cache.tokens <= 4096
        for text, output in zip(texts, outputs, strict=True):
            assert output == reference(llm, text), text
        again = concurrently(llm, texts)  # every prompt now starts from the cache
        assert [c.token_ids for c in again] == outputs


def concurrently(llm: LlmModel, texts: list[str]) -> list[Completion]:
    async def scenario() -> list[Completion]:
        done = await asyncio.gather(*(collect(llm.engine.generate(greedy(t))) for t in texts))
        return [c for (c,) in done]

    return asyncio.run(scenario())


def test_no_prefix_cache_when_it_is_sized_zero() -> None:
    with held_engine(prefix_cache_tokens=0) as llm:
        llm.engine.start()
        for _ in range(2):
            asyncio.run(whole(llm, greedy(SYSTEM, 4)))
        assert llm.engine.stats.prefix_hit_tokens == 0
        assert llm.engine.prefix_cache.tokens == 0


@pytest.mark.parametrize("options", [{}, {"logprobs": True, "top_logprobs": 2}])
def test_prefill_handover_with_chunks_and_prefix_hits_is_one_run(options: dict[str, Any]) -> None:
    with held_engine(prefill_chunk_tokens=16) as llm:
        llm.engine.start()
        for text in prompts(4, 5, (20, 60)):
            req = greedy(text, 12, **options)
            split = asyncio.run(split_run(llm, req))
            single = asyncio.run(whole(llm, req))
            assert split.token_ids == single.token_ids == reference(llm, text, 12)
            assert [lp.logprob for lp in split.logprobs] == pytest.approx(
                [lp.logprob for lp in single.logprobs], abs=1e-4
            )
        assert llm.engine.stats.prefix_hit_tokens > 0


def test_recompute_with_logprobs_from_a_prefix_hit_in_chunks() -> None:
    text = f"{SYSTEM} and then the story went on"
    req = greedy(text, 20, ignore_eos=True, logprobs=True, top_logprobs=2)
    with held_engine(prefill_chunk_tokens=16) as llm:
        engine = llm.engine
        engine.start()
        single = asyncio.run(whole(llm, req))  # its prompt's blocks are in the cache now
        ids = engine.prompt_ids(req)

        async def recompute(k: int) -> list[GenerateDelta]:
            resume = Resume(single.token_ids[:k], handoff=Handoff(), emit_prior=True)
            stream = engine.submit(req, ids, resume)
            return [await stream.__anext__() for _ in range(k + 1)]

        for k in (1, 7, 19):
            hits = engine.stats.prefix_hit_tokens
            deltas = asyncio.run(recompute(k))
            assert engine.stats.prefix_hit_tokens > hits
            assert [t for d in deltas for t in d.token_ids] == single.token_ids[: k + 1]
            got = [d.logprobs[0].logprob for d in deltas if d.logprobs]
            want = [lp.logprob for lp in single.logprobs[: k + 1]]
            assert got == pytest.approx(want, abs=1e-4)


def test_prompts_on_a_long_past_go_as_one_padded_batch(llm: LlmModel) -> None:
    runner = llm.engine.runner
    prefix = llm.engine.tokenize(SYSTEM)
    _, kv = runner.prefill(prefix)
    spans = ((0, 2), (9, 5), (30, 4), (50, 3))
    tails = [llm.engine.tokenize(" ".join(WORDS[i : i + n]), False) for i, n in spans]
    jobs = [PrefillJob(None, prefix + tail, done=len(prefix), kv=kv) for tail in tails]
    jobs.append(PrefillJob(None, llm.engine.tokenize("Once upon a time")))  # no past at all
    chunks = plan(jobs, 256, 256)
    assert [t for _, t in chunks] == [len(t) for t in tails] + [len(jobs[-1].tokens)]
    assert padded.cheaper(chunks)
    logits = run(runner, chunks)
    for job, last in zip(jobs, logits, strict=True):
        alone, whole = runner.prefill(job.tokens)
        assert last is not None
        assert torch.allclose(last[-1], alone, atol=1e-4)
        assert job.kv is not None
        for (k, v), (wk, wv) in zip(job.kv, whole, strict=True):
            assert k.shape == wk.shape == v.shape == wv.shape
            assert torch.allclose(k, wk, atol=1e-4)
            assert torch.allclose(v, wv, atol=1e-4)


def test_many_fresh_prompts_go_as_a_few_packed_rows(llm: LlmModel) -> None:
    runner = llm.engine.runner
    texts = prompts(12, 3, (3, 8, 13, 30))
    jobs = [PrefillJob(None, llm.engine.tokenize(t)) for t in texts]
    jobs[3].keep = 2  # a job that needs two positions' logits
    chunks = plan(jobs, 4096, 4096)
    layout = rows.layout(chunks)
    assert layout is not None
    assert len(layout) > 1
    assert sorted(i for row in layout for i in row) == list(range(len(jobs)))
    assert all(sum(chunks[i][1] for i in row) <= rows.ROW_TOKENS for row in layout if len(row) > 1)
    logits = run(runner, chunks)
    for job, mine in zip(jobs, logits, strict=True):
        alone, whole = runner.prefill_many(job.tokens, job.keep)
        assert mine is not None
        assert mine.shape == alone.shape
        assert torch.allclose(mine, alone, atol=1e-4)
        assert job.kv is not None
        for (k, v), (wk, wv) in zip(job.kv, whole, strict=True):
            assert k.shape == wk.shape == v.shape == wv.shape
            assert torch.allclose(k, wk, atol=1e-4)
            assert torch.allclose(v, wv, atol=1e-4)
    chunks = plan([PrefillJob(None, job.tokens, done=2, kv=job.kv) for job in jobs], 4096, 4096)
    assert rows.layout(chunks) is None  # prompts on a past go another way
    long = [PrefillJob(None, [5] * 600), *(PrefillJob(None, job.tokens) for job in jobs)]
    # rows as wide as the long one: mostly padding
    assert rows.layout(plan(long, 4096, 4096)) is None


def test_a_burst_at_an_idle_engine_is_gathered_into_one_pass() -> None:
    texts = prompts(12, 4, (2, 5, 8))
    with pytest.MonkeyPatch.context() as patch, held_engine(prefix_cache_tokens=0) as llm:
        engine = llm.engine
        seen = passes(patch, engine)
        later: list[Any] = []  # the rest of the burst, read by the loop while the engine gathers
        real = engine_module.caught_up

        def reading(loops: Any, timeout: float) -> None:
            for loop in loops:
                while later:
                    loop.call_soon_threadsafe(later.pop())
            real(loops, timeout)

        patch.setattr(engine_module, "caught_up", reading)

        async def scenario() -> list[Completion]:
            rest: list[Any] = []
            later.append(lambda: rest.extend(engine.generate(greedy(t)) for t in texts[1:]))
            first = engine.generate(greedy(texts[0]))  # the engine wakes on this one
            engine.start()
            (head,) = await asyncio.wait_for(collect(first), 120)
            done = await asyncio.wait_for(asyncio.gather(*map(collect, rest)), 120)
            return [head, *(c for (c,) in done)]

        done = asyncio.run(scenario())
        assert [len(takes) for takes, _, _ in seen] == [len(texts)]  # one pass for them all
        for text, completion in zip(texts, done, strict=True):
            assert completion.token_ids == reference(llm, text), text


# -- the pieces alone ---------------------------------------------------------------------------


def job(remaining: int, keep: int = 1) -> PrefillJob:
    return PrefillJob(None, [1] * remaining, keep)


def test_a_pass_takes_prompts_in_order_within_its_budget() -> None:
    def takes(jobs: list[PrefillJob]) -> list[int]:
        return [t for _, t in plan(jobs, 64, 64)]

    assert takes([job(500)]) == [64]  # the first is cut to a chunk
    assert takes([job(10), job(10), job(10)]) == [10, 10, 10]
    assert takes([job(10), job(500), job(4)]) == [10, 54]  # the last one chosen is cut
    assert takes([job(40), job(40)]) == [40, 24]
    assert takes([job(90, keep=3)]) == [90]  # never cut: it needs 3 positions' logits
    assert takes([job(90, keep=3), job(4)]) == [90]
    assert takes([job(4), job(90, keep=3)]) == [4]
    assert takes([job(4)] * 100) == [4] * 16


def test_while_streams_decode_long_prompts_share_one_chunk_and_short_ones_go_whole() -> None:
    def takes(jobs: list[PrefillJob]) -> list[int]:
        return [t for _, t in plan(jobs, 384, 32)]

    assert takes([job(500)]) == [32]  # a long prompt: one chunk a pass
    assert takes([job(500), job(300)]) == [32]  # two share it
    assert takes([job(20)] * 12) == [20] * 12  # short prompts whole, beyond a chunk together
    assert takes([job(500), job(20), job(33), job(10)]) == [32, 20, 10]  # short ones pass by
    assert takes([job(30)] * 20) == [30] * 12 + [24]  # the whole pass's budget still holds
    assert takes([job(90, keep=3)]) == [90]  # never cut, as above


def fake_kv(tokens: int, tag: float) -> list[tuple[torch.Tensor, torch.Tensor]]:
    k = torch.full((1, 2, tokens, 4), tag)
    return [(k, k + 1), (k + 2, k + 3)]


def test_the_prefix_cache_is_bounded_and_evicts_the_least_recent_prefix_from_its_end() -> None:
    cache = PrefixCache(capacity=64, block=16)
    a, b = list(range(48)), list(range(100, 148))
    cache.insert(a, fake_kv(48, 1.0), 48)  # 3 blocks
    assert cache.lookup(cache.digests(a, 47))[0] == 32  # whole blocks below the limit
    cache.insert(b, fake_kv(48, 2.0), 48)  # 3 more: over 64 tokens, a's last blocks go first
    assert cache.tokens == 64
    assert cache.lookup(cache.digests(b, 48))[0] == 48
    length, kv = cache.lookup(cache.digests(a, 48))
    assert length == 16  # its first block stayed, reachable from the start of a prompt
    assert kv is not None
    assert kv[1][1].shape == (1, 2, 16, 4)
    assert bool((kv[1][1] == 4.0).all())  # a's own values: layer 1, values
    assert cache.lookup(cache.digests([7, *a[1:]], 48)) == (0, None)  # another first token
    off = PrefixCache(capacity=0, block=16)
    off.insert(a, fake_kv(48, 1.0), 48)
    assert off.tokens == 0
    assert off.lookup(off.digests(a, 48)) == (0, None)


def test_the_forward_passes_raise_no_transformers_warning(
    llm: LlmModel, caplog: pytest.LogCaptureFixture
) -> None:
    """No deprecation (of ``past_key_values`` forms or anything else) from transformers: the
    runner hands the model its own cache class and arguments it documents."""
    runner = llm.engine.runner
    ids = llm.engine.tokenize("Once upon a time")
    library = logging.getLogger("transformers")  # it does not propagate to the root logger
    library.addHandler(caplog.handler)
    try:
        with warnings.catch_warnings(), caplog.at_level(logging.WARNING, "transformers"):
            warnings.simplefilter("error")
            _, kv = runner.prefill(ids)
            batch = DecodeBatch(runner)
            batch.join([kv])
            batch.step([5])
            first, second = PrefillJob(None, ids), PrefillJob(None, ids[:3])
            run(runner, [(first, 2), (second, 3)])
            run(runner, [(first, len(ids) - 2)])  # a later chunk, on its cached past
    finally:
        library.removeHandler(caplog.handler)
    assert [r.getMessage() for r in caplog.records if r.name.startswith("transformers")] == []


def test_the_switch_interval_is_short_while_engines_run_and_restored_after_the_last() -> None:
    before = sys.getswitchinterval()  # (another test's engine may be running: a fresh counter)
    try:
        sys.setswitchinterval(0.005)
        interval = engine_module.SwitchInterval()
        interval.engine_started()
        interval.engine_started()
        assert sys.getswitchinterval() == engine_module.SWITCH_INTERVAL_S
        interval.engine_stopped()
        assert sys.getswitchinterval() == engine_module.SWITCH_INTERVAL_S
        interval.engine_stopped()
        assert sys.getswitchinterval() == 0.005
        interval.engine_stopped()  # one stop too many changes nothing
        assert sys.getswitchinterval() == 0.005
    finally:
        sys.setswitchinterval(before)
