"""Prefill/decode disaggregation with ``runtime: vllm``: a prefill and a decode instance behind
the scheduler. vLLM's KV cache does not travel between them: the prefill instance chooses the
first token and hands over no cache; the decode instance recomputes the cache of the prompt and
that token (the recompute path) and decodes on. Greedy text is what vLLM's own server answers."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.pdproc import start_instance, start_scheduler, status
from tests.serverproc import ServerProcess, stop_cleanly
from tests_vllm.conftest import MODEL, START_TIMEOUT_S, model_folder
from tests_vllm.test_vllm_runtime import FAMILIES, PROMPTS, completion
from tests_vllm.test_vllm_structured import FORMS, MESSAGES, chat

LLM_FAMILIES = {k: v for k, v in FAMILIES.items() if k != "oip"}  # OIP has no PD split


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, ServerProcess]]:
    repo = tmp_path_factory.mktemp("vllm_pd_repo")
    model_folder(repo)
    with pytest.MonkeyPatch.context() as patch:
        from tests import serverproc

        patch.setattr(serverproc, "START_TIMEOUT_S", START_TIMEOUT_S)
        p = start_instance(repo, "prefill")
        d = start_instance(repo, "decode")
        s = start_scheduler([p], [d])
    yield {"prefill": p, "decode": d, "scheduler": s}
    for proc in (s, p, d):
        stop_cleanly(proc)


@pytest.fixture(scope="module")
def pd(cluster: dict[str, ServerProcess]) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=cluster["scheduler"].http_url, timeout=120) as client:
        yield client


@pytest.fixture(scope="module")
def reference(vllm_http: httpx.Client) -> dict[str, str]:
    return {p: completion(vllm_http, p) for p in PROMPTS}


@pytest.mark.parametrize("family", LLM_FAMILIES)
def test_every_family_split_answers_what_vllm_answers(
    pd: httpx.Client, reference: dict[str, str], family: str
) -> None:
    assert {p: LLM_FAMILIES[family](pd, p) for p in PROMPTS} == reference


def test_requests_were_split_and_recomputed(
    cluster: dict[str, ServerProcess], pd: httpx.Client
) -> None:
    before = status(cluster["decode"])["decode"]["finished"]
    LLM_FAMILIES["openai-stream"](pd, "Once upon a time")
    after_p, after_d = status(cluster["prefill"]), status(cluster["decode"])
    assert after_d["decode"]["finished"] == before + 1
    assert after_p["prefill"]["handovers"] >= after_d["decode"]["finished"]
    assert after_p["prefill"]["leases"] == after_p["prefill"]["leaseBytes"] == 0  # no cache


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize("form", FORMS[:2], ids=["json_schema", "regex"])
def test_structured_outputs_through_the_scheduler_answer_what_vllm_answers(
    cluster: dict[str, ServerProcess],
    pd: httpx.Client,
    vllm_http: httpx.Client,
    form: tuple[dict[str, Any], dict[str, Any]],
    stream: bool,
) -> None:
    """vLLM's grammar cannot start past the prefill instance's token, so the prefill instance
    serves a constrained request whole (as it does n > 1): same text, no hand-over."""
    ours, theirs = form
    expected = chat(vllm_http, {"structured_outputs": theirs})["message"]["content"]
    handovers = status(cluster["prefill"])["prefill"]["handovers"]
    doc = {"model": MODEL, "messages": MESSAGES, "max_tokens": 40, "temperature": 0, **ours}
    if stream:
        with pd.stream("POST", "/v1/chat/completions", json=doc | {"stream": True}) as reply:
            assert reply.status_code == 200, reply.read()
            lines = [line[6:] for line in reply.iter_lines() if line.startswith("data: {")]
        chunks = [json.loads(line)["choices"] for line in lines]
        text = "".join(c[0]["delta"].get("content") or "" for c in chunks if c)
    else:
        reply = pd.post("/v1/chat/completions", json=doc)
        assert reply.status_code == 200, reply.text
        text = reply.json()["choices"][0]["message"]["content"]
    assert text == expected
    assert status(cluster["prefill"])["prefill"]["handovers"] == handovers
