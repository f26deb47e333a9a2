"""The engine's PD hooks on the tiny example model: prefill-only with the cache handed over,
decoding on from a shipped cache (through the wire format), recompute from prompt + output,
the KV budget (admission waits, preemption of the newest preemptible sequence)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from rosettaserve.core.generate import (
    Completion,
    GenerateDelta,
    GenerateRequest,
    SamplingParams,
    collect,
)
from rosettaserve.pd.kv_transfer import decode, encode, geometry
from rosettaserve.runtimes.llm import LlmModel
from rosettaserve.runtimes.llm.resume import Handoff, Preempted, Resume, victims
from tests.llmmodel import held_engine

PROMPTS = ["Once upon a time", "The quick brown", "你好", "In the café on the corner"]


def request(prompt: str, max_new: int = 20, **kw: Any) -> GenerateRequest:
    temperature = kw.pop("temperature", 0.0)
    params = SamplingParams(max_new_tokens=max_new, temperature=temperature, **kw)
    return GenerateRequest(prompt=prompt, sampling=params)


async def split_run(llm: LlmModel, req: GenerateRequest, through_wire: bool = True) -> Completion:
    """Prefill with a handover, then decode on from the handed cache (as two instances do)."""
    engine = llm.engine
    ids = engine.prompt_ids(req)
    handoff = Handoff()
    first = await engine.submit(req, ids, Resume(handoff=handoff, emit_prior=True)).__anext__()
    done = Completion(0)
    done.add(first)
    if first.finish_reason is not None:
        return done
    assert handoff.kv is not None
    kv = handoff.kv
    if through_wire:
        geo = geometry(engine.runner.model)
        kv = decode(encode(kv, "1", geo), geo, len(ids), 1 << 30)
    resume = Resume(first.token_ids, kv, handoff.seed, handoff.sampler_state, preemptible=True)
    async for delta in engine.submit(req, ids, resume):
        done.add(delta)
    return done


async def whole(llm: LlmModel, req: GenerateRequest) -> Completion:
    (done,) = await collect(llm.generate(req))
    return done


@pytest.mark.parametrize(
    "options",
    [
        {"ignore_eos": True},
        {"temperature": 1.3, "seed": 11, "top_p": 0.9},
        {"temperature": 1.1},  # no seed: the engine's own seed travels with the cache
        {"logprobs": True, "top_logprobs": 3, "repetition_penalty": 1.3},
        {"stop": ("small",), "presence_penalty": 0.5},
    ],
)
def test_prefill_here_decode_there_is_one_run(llm: LlmModel, options: dict[str, Any]) -> None:
    for prompt in PROMPTS:
        req = request(prompt, 24, **options)
        split = asyncio.run(split_run(llm, req))
        if "seed" not in options and options.get("temperature"):
            req.sampling.seed = split.seed  # the same draws from the same seed
        single = asyncio.run(whole(llm, req))
        assert split.token_ids == single.token_ids, (prompt, options)
        assert split.text == single.text
        assert split.finish_reason == single.finish_reason
        assert len(split.logprobs) == len(single.logprobs)
        for a, b in zip(split.logprobs, single.logprobs, strict=True):
            assert a.token_id == b.token_id
            assert a.logprob == pytest.approx(b.logprob, abs=1e-4)


def test_a_one_token_request_ends_at_prefill(llm: LlmModel) -> None:
    done = asyncio.run(split_run(llm, request("Once upon a time", 1)))
    assert len(done.token_ids) == 1
    assert done.finish_reason is not None


def test_recompute_from_prompt_and_output_goes_on_as_before(llm: LlmModel) -> None:
    req = request("Once upon a time", 20, ignore_eos=True, logprobs=True, top_logprobs=2)
    single = asyncio.run(whole(llm, req))
    engine = llm.engine
    ids = engine.prompt_ids(req)

    async def recompute(k: int) -> list[GenerateDelta]:
        stream = engine.submit(
            req, ids, Resume(single.token_ids[:k], handoff=Handoff(), emit_prior=True)
        )
        return [await stream.__anext__() for _ in range(k + 1)]

    for k in (1, 7, 19):
        deltas = asyncio.run(recompute(k))
        assert [t for d in deltas for t in d.token_ids] == single.token_ids[: k + 1]
        assert "".join(d.text for d in deltas) == "".join(single.token_texts[: k + 1])
        logprobs = [d.logprobs[0].logprob for d in deltas if d.logprobs]
        assert logprobs == pytest.approx([lp.logprob for lp in single.logprobs[: k + 1]], abs=1e-4)


def test_the_newest_preemptible_sequences_go_first() -> None:
    assert victims([10, 10, 10], [True, True, True], budget=30) == []
    assert victims([10, 10, 10], [True, True, True], budget=25) == [2]
    assert victims([10, 10, 10], [True, True, True], budget=5) == [2, 1]  # one always stays
    assert victims([10, 10, 10], [True, True, False], budget=15) == [1, 0]
    assert victims([10, 10], [False, False], budget=5) == []


BUDGET = 40  # KV cache tokens


def test_the_kv_budget_preempts_the_newest_sequence() -> None:
    with held_engine(kv_budget_tokens=BUDGET) as llm:
        engine = llm.engine
        older, newer = (request(p, 30, ignore_eos=True) for p in PROMPTS[:2])
        older_ids, newer_ids = engine.prompt_ids(older), engine.prompt_ids(newer)
        assert len(older_ids) + 1 + len(newer_ids) + 1 <= BUDGET  # both are admitted at once

        async def scenario() -> tuple[Completion, Preempted]:
            a = engine.submit(older, older_ids, Resume(preemptible=True))
            b = engine.submit(newer, newer_ids, Resume(preemptible=True))
            engine.start()  # its first admission takes both: they decode in the same steps
            with pytest.raises(Preempted) as caught:
                async for _ in b:
                    pass
            (done,) = await collect(a)
            return done, caught.value

        done, preempted = asyncio.run(scenario())
        assert len(done.token_ids) == 30  # the older one ran to its end
        assert preempted.prompt_ids == newer_ids
        # one token each per step: the newer goes before the step that would outgrow the budget
        steps = (BUDGET - len(older_ids) - len(newer_ids)) // 2 + 1
        assert len(preempted.output_ids) == steps
        assert engine.stats.preempted == 1
        assert engine.stats.peak_batch == 2
        # what was preempted, recomputed elsewhere, is what one run gives
        single = asyncio.run(whole(llm, request(PROMPTS[1], 30, ignore_eos=True)))
        assert preempted.output_ids == single.token_ids[:steps]


def test_a_request_that_does_not_fit_beside_a_running_one_waits() -> None:
    with held_engine(kv_budget_tokens=BUDGET) as llm:
        engine = llm.engine
        short = request("hi", 3, ignore_eos=True)
        room = BUDGET - (len(engine.prompt_ids(short)) + 1)  # what the short one leaves
        ids = engine.tokenize("The cat sat on the mat and the dog sat on the log. " * 4)
        long = request("", 12, ignore_eos=True)
        long.prompt_token_ids = ids[:room]  # its KV cache needs room + 1 tokens: one too many
        assert len(long.prompt_token_ids) == room

        async def queued_together() -> list[int]:
            a = engine.submit(long, engine.prompt_ids(long))
            b = engine.submit(short, engine.prompt_ids(short))
            engine.start()  # its first admission sees both waiting
            done = await asyncio.gather(collect(a), collect(b))
            return [len(c.token_ids) for (c,) in done]

        assert asyncio.run(queued_together()) == [12, 3]
        assert engine.stats.peak_batch == 1  # the short one waited for room in the budget
        assert engine.stats.prefills == 2
