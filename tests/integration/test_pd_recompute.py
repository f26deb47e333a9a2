"""Recompute: a decode instance with a tiny KV budget preempts sequences and sends ``retry:``;
the scheduler re-dispatches the rebuilt body with ``is-recompute: true``, and every family
still gives exactly the text of a mixed instance."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.integration.test_llm_families import LLM_FAMILIES, PROMPTS, concurrently
from tests.pdproc import instances, llm_repo, start_instance, start_scheduler, status
from tests.serverproc import ServerProcess, start_server, stop_cleanly

BUDGET = 48  # KV tokens: two of the 24-token requests at once do not fit


@pytest.fixture(scope="module")
def procs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, ServerProcess]]:
    repo = llm_repo(tmp_path_factory.mktemp("pd_recompute"))
    small: Path = llm_repo(tmp_path_factory.mktemp("pd_recompute_small"), kv_budget_tokens=BUDGET)
    started = {
        "mixed": start_server(repo),
        "prefill": start_instance(repo, "prefill"),
        "decode": start_instance(small, "decode"),
    }
    started["scheduler"] = start_scheduler(
        [started["prefill"]], [started["decode"]], "--max-retry", "1000"
    )
    yield started
    for proc in started.values():
        stop_cleanly(proc)


def test_preempted_requests_come_back_with_the_same_text(procs: dict[str, ServerProcess]) -> None:
    jobs = [(f, p) for f in LLM_FAMILIES for p in PROMPTS]
    with httpx.Client(base_url=procs["mixed"].http_url, timeout=60) as ref:
        expected = {(f, p): LLM_FAMILIES[f](ref, p) for f, p in jobs}
    assert concurrently(procs["scheduler"].http_url, jobs, timeout=120) == expected
    decode = status(procs["decode"])
    assert decode["resource"]["kvBudgetTokens"] == BUDGET
    assert decode["resource"]["preempted"] > 0  # the budget really ran out
    assert decode["decode"]["retried"] == decode["resource"]["preempted"]
    stats = instances(procs["scheduler"])["stats"]
    assert stats["retries"] == decode["decode"]["retried"]
    assert stats.get("failed", 0) == 0


def test_a_request_alone_is_never_preempted(procs: dict[str, ServerProcess]) -> None:
    before = status(procs["decode"])["resource"]["preempted"]
    doc = {"model": "tiny_llama", "prompt": "Once upon a time", "max_tokens": 100}
    doc |= {"temperature": 0, "ignore_eos": True}  # 105 tokens: twice the budget, alone
    with httpx.Client(timeout=60) as client:
        got = client.post(procs["scheduler"].http_url + "/v1/completions", json=doc).json()
        expected = client.post(procs["mixed"].http_url + "/v1/completions", json=doc).json()
    assert got["choices"][0]["text"] == expected["choices"][0]["text"]
    assert got["usage"]["completion_tokens"] == 100
    assert status(procs["decode"])["resource"]["preempted"] == before
