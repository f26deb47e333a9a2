"""Runtime vllm's admission (runtimes/vllm/engine.py), read with a stand-in for vLLM's
``AsyncLLM`` (vLLM itself is tested in tests_vllm): the request's priority reaches vLLM, or is
refused when the model's engine_args chose vLLM's "fcfs"; the capacity
(``max_num_seqs + max_waiting`` sequences) is shared between API keys by the built-in engine's
rule (runtimes/llm/capacity.py), its message without keys as before; and every way a request
leaves gives its key's sequences back, once."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from rosettaserve.core.errors import InvalidInput, ModelError, Overloaded
from rosettaserve.core.generate import Fields, GenerateRequest, GeneratorInfo, SamplingParams
from rosettaserve.core.share import DEFAULT, SHARE, Share
from rosettaserve.runtimes.vllm import engine as vllm_engine
from rosettaserve.runtimes.vllm.args import engine_kwargs
from rosettaserve.runtimes.vllm.engine import VllmConfig, VllmEngine
from rosettaserve.runtimes.vllm.stream import VllmStream
from tests.llmmodel import drain
from tests.unit.vllm_outputs import Output, Sequence

A, B = Share("key#1", 1.0, 0), Share("key#2", 1.0, 0)


class FakeLlm:
    """What the engine calls of vLLM's ``AsyncLLM``; a request fails when its prompt is [0]."""

    def __init__(self) -> None:
        self.priorities: list[int] = []
        self.aborted: list[str] = []

    def generate(
        self, prompt: dict[str, Any], params: Any, request_id: str, priority: int = 0
    ) -> AsyncIterator[Output]:
        self.priorities.append(priority)
        return self.outputs(prompt["prompt_token_ids"], params)

    async def outputs(self, ids: list[int], n: int) -> AsyncIterator[Output]:
        if ids == [0]:
            raise RuntimeError("the engine core died")
        yield Output([Sequence(i, "x", [5], "length") for i in range(n)])

    async def abort(self, request_id: str) -> None:
        self.aborted.append(request_id)

    def get_num_unfinished_requests(self) -> int:
        return 0


@pytest.fixture(autouse=True)
def no_vllm(monkeypatch: pytest.MonkeyPatch) -> None:
    """vLLM's ``SamplingParams`` stand in as the request's ``n`` (FakeLlm reads it)."""
    monkeypatch.setattr(vllm_engine, "vllm_sampling", lambda p, n, max_new: n)


def engine(capacity: int = 4, by_priority: bool = True) -> VllmEngine:
    info = GeneratorInfo("m", 64, 4, 2, capacity - 2, 4, "float32", "cpu")
    config = VllmConfig(64, 2, capacity - 2, by_priority=by_priority)
    return VllmEngine(FakeLlm(), object(), info, config, vocab=100)


def submit(e: VllmEngine, who: Share, n: int = 1, ids: list[int] | None = None) -> VllmStream:
    """A request submitted as ``who``'s (as the key check and X-Priority set it)."""
    request = GenerateRequest(prompt="", sampling=SamplingParams(max_new_tokens=1), n=n)
    token = SHARE.set(who)
    try:
        return e.submit(request, ids or [7], 1)
    finally:
        SHARE.reset(token)


def refusal(e: VllmEngine, who: Share, n: int = 1) -> str:
    with pytest.raises(Overloaded) as refused:
        submit(e, who, n)
    return refused.value.message


def test_the_requests_priority_reaches_vllm() -> None:
    e = engine()
    submit(e, DEFAULT)
    submit(e, DEFAULT.prioritised(-3))
    assert e.llm.priorities == [0, -3]


@pytest.mark.parametrize(
    ("engine_args", "policy"), [({}, "priority"), ({"scheduling_policy": "fcfs"}, "fcfs")]
)
def test_vllm_schedules_by_priority_unless_engine_args_say_otherwise(
    engine_args: dict[str, str], policy: str
) -> None:
    params = Fields({"engine_args": engine_args}, "parameters")
    assert engine_kwargs("m", params, Path("m"))["scheduling_policy"] == policy


def test_a_priority_on_an_fcfs_engine_is_refused_and_counts_nothing() -> None:
    e = engine(by_priority=False)
    with pytest.raises(InvalidInput, match="scheduling_policy 'fcfs'"):
        submit(e, DEFAULT.prioritised(2))
    assert e.capacity.active == 0
    submit(e, DEFAULT)  # priority 0: fcfs serves it
    assert e.llm.priorities == [0]


def test_without_keys_the_plain_limit_and_its_message() -> None:
    e = engine(capacity=2)
    submit(e, DEFAULT, n=2)
    assert refusal(e, DEFAULT) == (
        "the model is at capacity (2 sequences running or queued, limit 2); retry later"
    )


def test_a_quiet_key_is_admitted_while_the_flooding_key_is_refused_at_its_share() -> None:
    e = engine(capacity=4)
    for _ in range(4):
        submit(e, A)
    assert "limit 4); retry later" in refusal(e, A)  # alone: the plain limit
    submit(e, B, n=2)  # b's share: 4 / 2 sequences
    assert refusal(e, B) == (
        "the model is at capacity (6 sequences running or queued, limit 4) and 2 of "
        "those are this API key's, its share; retry later"
    )
    assert e.capacity.tenants.held == {"key#1": 4, "key#2": 2}


async def finished(e: VllmEngine) -> None:
    assert await drain(submit(e, A, n=2)) is None


async def failed(e: VllmEngine) -> None:
    assert isinstance(await drain(submit(e, A, ids=[0])), ModelError)


async def cancelled_unread(e: VllmEngine) -> None:  # e.g. a sibling prompt failed first
    stream = submit(e, A, n=2)
    stream.cancel()
    await asyncio.sleep(0)  # the abort task runs
    assert e.llm.aborted == [stream.request_id]


async def cancelled_after_its_end(e: VllmEngine) -> None:  # the plane cancels every stream
    stream = submit(e, A)
    assert await drain(stream) is None
    stream.cancel()
    stream.cancel()
    assert e.llm.aborted == []


@pytest.mark.parametrize("exit_", [finished, failed, cancelled_unread, cancelled_after_its_end])
def test_every_exit_gives_the_keys_sequences_back_once(exit_: Any) -> None:
    e = engine()
    submit(e, B)  # another key's, still held: a double release would show in the counts
    asyncio.run(exit_(e))
    assert e.capacity.tenants.held == {"key#2": 1}
    assert e.capacity.active == 1


def test_a_request_vllm_refuses_at_submission_counts_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def refused(p: SamplingParams, n: int, max_new: int) -> None:
        raise InvalidInput("vLLM refused the sampling parameters: temperature")

    monkeypatch.setattr(vllm_engine, "vllm_sampling", refused)
    e = engine()
    with pytest.raises(InvalidInput):
        submit(e, A)
    assert e.capacity.active == 0
    assert e.capacity.tenants.held == {}
