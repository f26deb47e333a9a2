"""The LLM engine admits waiting requests by priority, then fairly between API keys
(scheduling/fair_share.py), not first come first served. One sequence runs at a time, so the
order requests start in is the order they were admitted in."""

from __future__ import annotations

import asyncio

from rosettaserve.core import share
from rosettaserve.core.generate import GenerateRequest, SamplingParams
from rosettaserve.core.share import Share
from tests.llmmodel import load_llm

A, B = Share("key#1", 1.0, 0), Share("key#2", 1.0, 0)


def greedy(prompt: str, max_new: int) -> GenerateRequest:
    params = SamplingParams(max_new_tokens=max_new, temperature=0.0, ignore_eos=True)
    return GenerateRequest(prompt=prompt, sampling=params)


def test_waiting_requests_are_admitted_by_priority_then_in_turns_between_keys() -> None:
    llm = load_llm(max_num_seqs=1, max_waiting=8, max_model_len=100_000)
    started: list[str] = []

    async def queued(name: str, who: Share) -> None:
        share.SHARE.set(who)  # (this task's own context: as the transports set it)
        async for _ in llm.generate(greedy("The quick brown", max_new=2)):
            if name not in started:
                started.append(name)

    async def check() -> None:
        long = llm.generate(greedy("Once upon", max_new=50_000))
        await long.__anext__()  # running: everything after it waits
        arrivals = [("a0", A), ("a1", A), ("a2", A), ("b0", B), ("urgent", A.prioritised(-1))]
        tasks = []
        for name, who in arrivals:
            tasks.append(asyncio.create_task(queued(name, who)))
            await asyncio.sleep(0)  # each submitted before the next
        while llm.engine.active < 1 + len(arrivals):  # all of them submitted
            await asyncio.sleep(0.001)
        long.cancel()
        await asyncio.gather(*tasks)

    try:
        asyncio.run(asyncio.wait_for(check(), timeout=60))
    finally:
        llm.unload()
    assert started == ["urgent", "a0", "b0", "a1", "a2"]
