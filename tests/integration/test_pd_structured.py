"""Structured output through a scheduler, a prefill and a decode instance: the decode side
replays the prefill instance's first token into a fresh matcher, so the answer (greedy and
seeded, streamed and not) is the mixed instance's, and matches its schema."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import jsonschema
import pytest

from tests.integration.test_llm_structured import RESPONSE_FORMAT, SCHEMA
from tests.pdproc import llm_repo, start_instance, start_scheduler, status
from tests.serverproc import ServerProcess, served, start_server, stop_cleanly

PROMPTS = ["What is the weather in Paris?", "Describe the sky", "hi"]


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return llm_repo(tmp_path_factory.mktemp("pd_structured_repo"))


@pytest.fixture(scope="module")
def mixed(repo: Path) -> Iterator[ServerProcess]:
    yield from served(start_server(repo))


@pytest.fixture(scope="module")
def cluster(repo: Path) -> Iterator[dict[str, ServerProcess]]:
    p = start_instance(repo, "prefill")
    d = start_instance(repo, "decode")
    s = start_scheduler([p], [d], "--policy", "round-robin")
    yield {"prefill": p, "decode": d, "scheduler": s}
    for proc in (s, p, d):
        stop_cleanly(proc)


def answer(url: str, prompt: str, stream: bool, **sampling: Any) -> str:
    doc = {
        "model": "tiny_llama",
        "messages": [{"role": "user", "content": prompt}],
        "response_format": RESPONSE_FORMAT,
        "max_tokens": 80,
        "stream": stream,
        **sampling,
    }
    with httpx.Client(base_url=url, timeout=120) as client:
        if not stream:
            reply = client.post("/v1/chat/completions", json=doc)
            assert reply.status_code == 200, reply.text
            choice = reply.json()["choices"][0]
            assert choice["finish_reason"] == "stop"
            return str(choice["message"]["content"])
        with client.stream("POST", "/v1/chat/completions", json=doc) as r:
            assert r.status_code == 200
            events = [line[6:] for line in r.iter_lines() if line.startswith("data: {")]
        chunks = [json.loads(e)["choices"] for e in events]
        return "".join(c[0]["delta"].get("content") or "" for c in chunks if c)


def test_a_json_schema_answer_through_pd_is_the_mixed_instances(
    cluster: dict[str, ServerProcess], mixed: ServerProcess
) -> None:
    before = status(cluster["decode"])["decode"]["finished"]
    runs = 0
    for prompt in PROMPTS:
        for sampling in ({"temperature": 0}, {"temperature": 1.0, "seed": 11}):
            expected = answer(mixed.http_url, prompt, False, **sampling)
            jsonschema.validate(json.loads(expected), SCHEMA)
            for stream in (False, True):
                assert answer(cluster["scheduler"].http_url, prompt, stream, **sampling) == expected
                runs += 1
    assert status(cluster["decode"])["decode"]["finished"] - before == runs  # really split
