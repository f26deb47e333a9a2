"""The engine's capacity (``max_num_seqs + max_waiting`` sequences, runtimes/llm/capacity.py)
shared between API keys by the queue limit's rule: a quiet key is admitted past it while the
flooding key is refused at its share; without keys, the plain limit and its message as before;
and every way a sequence leaves the engine gives its key's count back.

Requests are submitted before the engine thread starts (``held_engine``), or with the engine's
lock held while the counts are read, so what is counted is decided by the test, not by timing."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

import pytest

from rosettaserve.core.errors import ModelError, Overloaded
from rosettaserve.core.generate import GenerateRequest, SamplingParams, collect
from rosettaserve.core.share import DEFAULT, SHARE, Share
from rosettaserve.runtimes.llm import LlmModel
from rosettaserve.runtimes.llm.resume import Handoff, Preempted, Resume
from rosettaserve.runtimes.llm.stream import GenerationStream
from tests.llmmodel import drain, held_engine
from tests.unit.test_llm_engine import FIRST_TOKEN, THIRD_TOKEN, wait_until

A, B, C, D = (Share(f"key#{i}", 1.0, 0) for i in range(1, 5))


def request(n: int = 1, max_new: int = 2, prompt: str = "hi", **kw: Any) -> GenerateRequest:
    fields: dict[str, Any] = {"temperature": 0.0, **kw}
    params = SamplingParams(max_new_tokens=max_new, ignore_eos=True, **fields)
    return GenerateRequest(prompt=prompt, sampling=params, n=n)


POISON = {"temperature": 1.5, "seed": 1}  # sampled, as test_llm_engine.py poisons its requests


def submit(
    llm: LlmModel, who: Share, req: GenerateRequest, resume: Resume | None = None
) -> GenerationStream:
    """``req`` submitted as ``who``'s (as the key check sets it for the request being served)."""
    token = SHARE.set(who)
    try:
        return llm.engine.submit(req, llm.engine.prompt_ids(req), resume)
    finally:
        SHARE.reset(token)


def refusal(llm: LlmModel, who: Share, n: int = 1) -> str:
    with pytest.raises(Overloaded) as refused:
        submit(llm, who, request(n))
    return refused.value.message


def test_a_quiet_key_is_admitted_while_the_flooding_key_is_refused_at_its_share() -> None:
    with held_engine(max_num_seqs=2, max_waiting=2) as llm:  # capacity: 4 sequences
        engine = llm.engine

        async def scenario() -> list[int]:
            streams = [(submit(llm, A, request()), 1) for _ in range(4)]  # alone: everything
            assert refusal(llm, A) == (
                "the model is at capacity (4 sequences running or queued, limit 4); retry later"
            )
            streams.append((submit(llm, B, request(n=2)), 2))  # b's share: 4 / 2 sequences
            assert refusal(llm, B) == (
                "the model is at capacity (6 sequences running or queued, limit 4) and 2 of "
                "those are this API key's, its share; retry later"
            )
            assert "and 4 of those are this API key's, its share" in refusal(llm, A)
            streams.append((submit(llm, C, request(n=2)), 2))  # c's share: 4 / 3, rounded up
            assert refusal(llm, D) == (
                "the model is at capacity (8 sequences running or queued, twice its limit of "
                "4); retry later"
            )
            assert engine.capacity.tenants.held == {"key#1": 4, "key#2": 2, "key#3": 2}
            assert engine.active == 8
            engine.start()
            done = await asyncio.gather(*(collect(s, n) for s, n in streams))
            return [len(c.token_ids) for completions in done for c in completions]

        assert asyncio.run(scenario()) == [2] * 8  # every admitted sequence ran to its end
        wait_until(lambda: engine.active == 0)
        assert engine.capacity.tenants.held == {}
        assert engine.capacity.tenants.weights == {}


def test_without_keys_the_plain_limit_and_its_message() -> None:
    with held_engine(max_num_seqs=1, max_waiting=1) as llm:

        async def scenario() -> None:
            streams = [submit(llm, DEFAULT, request()) for _ in range(2)]
            assert refusal(llm, DEFAULT) == (
                "the model is at capacity (2 sequences running or queued, limit 2); retry later"
            )
            llm.engine.start()
            await asyncio.gather(*(collect(s) for s in streams))

        asyncio.run(scenario())
        wait_until(lambda: llm.engine.active == 0)
        assert llm.engine.capacity.tenants.held == {}


# -- every exit gives the key's sequences back ---------------------------------------------------


def counted(llm: LlmModel, who: Share, req: GenerateRequest, **kw: Any) -> GenerationStream:
    """Submitted; its sequences are counted as ``who``'s (read with the engine's lock held:
    none of them can leave meanwhile)."""
    with llm.engine._cond:
        stream = submit(llm, who, req, **kw)
        assert llm.engine.capacity.tenants.held[who.tenant] >= req.n
    return stream


async def finished(llm: LlmModel) -> None:
    assert await drain(counted(llm, A, request(n=2, max_new=4))) is None


async def finished_at_its_prefill(llm: LlmModel) -> None:  # its first token was its last
    assert await drain(counted(llm, A, request(max_new=1))) is None


async def handed_over(llm: LlmModel) -> None:  # a prefill instance: the cache leaves
    resume = Resume(handoff=Handoff(), emit_prior=True)
    first = await counted(llm, A, request(max_new=8), resume=resume).__anext__()
    assert first.token_ids


async def cancelled_while_running(llm: LlmModel) -> None:
    stream = counted(llm, A, request(max_new=500))  # (the window: 512 tokens)
    await stream.__anext__()
    stream.cancel()


async def failed_at_its_prefill(llm: LlmModel) -> None:
    error = await drain(counted(llm, A, request(max_new=30, **POISON, **FIRST_TOKEN)))
    assert isinstance(error, ModelError)


async def failed_while_decoding(llm: LlmModel) -> None:
    error = await drain(counted(llm, A, request(n=2, max_new=30, **POISON, **THIRD_TOKEN)))
    assert isinstance(error, ModelError)


EXITS: list[Callable[[LlmModel], Coroutine[Any, Any, None]]] = [
    finished,
    finished_at_its_prefill,
    handed_over,
    cancelled_while_running,
    failed_at_its_prefill,
    failed_while_decoding,
]


@pytest.mark.parametrize("exit_", EXITS, ids=[f.__name__ for f in EXITS])
def test_every_exit_of_a_running_sequence_gives_its_count_back(
    llm: LlmModel, exit_: Callable[[LlmModel], Coroutine[Any, Any, None]]
) -> None:
    asyncio.run(exit_(llm))
    wait_until(lambda: llm.engine.active == 0)
    assert llm.engine.capacity.tenants.held == {}
    assert llm.engine.capacity.tenants.weights == {}


def test_a_request_cancelled_while_waiting_gives_its_count_back() -> None:
    with held_engine(max_num_seqs=1) as llm:

        async def scenario() -> None:
            first = counted(llm, A, request())
            gone = counted(llm, B, request(n=1))
            gone.cancel()  # before the engine thread first admits: dropped from the queue
            llm.engine.start()
            assert await drain(first) is None

        asyncio.run(scenario())
        wait_until(lambda: llm.engine.active == 0)
        assert llm.engine.capacity.tenants.held == {}


def test_a_preempted_sequence_gives_its_count_back() -> None:
    with held_engine(kv_budget_tokens=40) as llm:  # the two outgrow it (test_pd_engine.py)
        engine = llm.engine

        async def scenario() -> BaseException | None:
            first, second = (Resume(preemptible=True) for _ in range(2))
            older = counted(llm, A, request(max_new=30, prompt="Once upon a time"), resume=first)
            newer = counted(llm, B, request(max_new=30, prompt="The quick brown"), resume=second)
            engine.start()
            error = await drain(newer)
            assert await drain(older) is None
            return error

        assert isinstance(asyncio.run(scenario()), Preempted)
        wait_until(lambda: engine.active == 0)
        assert engine.stats.preempted == 1
        assert engine.capacity.tenants.held == {}


def test_the_sequences_of_an_unloaded_model_give_their_counts_back() -> None:
    with held_engine(max_num_seqs=1, max_model_len=100_000) as llm:
        engine = llm.engine

        async def scenario() -> None:
            running = counted(llm, A, request(max_new=50_000))
            waiting = counted(llm, B, request())
            engine.start()
            await running.__anext__()
            await asyncio.to_thread(engine.stop)  # as unloading does: both fail
            assert isinstance(await drain(running), ModelError)
            assert isinstance(await drain(waiting), ModelError)

        asyncio.run(scenario())
        assert engine.active == 0
        assert engine.capacity.tenants.held == {}
