"""Every LLM family through a scheduler, a prefill and a decode instance (real processes on
loopback), against a mixed instance: the same greedy (and seeded) text, stream and not, with
each family's own framing, and the official clients unchanged."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import orjson
import pytest
from text_generation import Client as TgiClient

from tests.integration.test_llm_families import (
    LLM_FAMILIES,
    PROMPTS,
    concurrently,
    post,
    sse_events,
    stream_body,
)
from tests.pdproc import llm_repo, start_instance, start_scheduler, status
from tests.serverproc import ServerProcess, served, start_server, stop_cleanly


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return llm_repo(tmp_path_factory.mktemp("pd_repo"))


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


@pytest.fixture(scope="module")
def pd(cluster: dict[str, ServerProcess]) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=cluster["scheduler"].http_url, timeout=60) as client:
        yield client


@pytest.fixture(scope="module")
def ref(mixed: ServerProcess) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=mixed.http_url, timeout=60) as client:
        yield client


@pytest.mark.parametrize("family", LLM_FAMILIES)
def test_every_family_gives_the_mixed_text(
    pd: httpx.Client, ref: httpx.Client, family: str
) -> None:
    call = LLM_FAMILIES[family]
    expected = {p: call(ref, p) for p in PROMPTS}
    assert all(expected.values())
    assert {p: call(pd, p) for p in PROMPTS} == expected


def test_concurrent_requests_of_every_family(
    cluster: dict[str, ServerProcess], ref: httpx.Client
) -> None:
    jobs = [(f, p) for f in LLM_FAMILIES for p in PROMPTS]
    expected = {(f, p): LLM_FAMILIES[f](ref, p) for f, p in jobs}
    assert concurrently(cluster["scheduler"].http_url, jobs) == expected


def test_requests_really_were_split(cluster: dict[str, ServerProcess], pd: httpx.Client) -> None:
    before = status(cluster["decode"])["decode"]["finished"]
    LLM_FAMILIES["openai-stream"](pd, "Once upon a time")
    after_p, after_d = status(cluster["prefill"]), status(cluster["decode"])
    assert after_d["decode"]["finished"] == before + 1
    assert after_p["prefill"]["handovers"] >= after_d["decode"]["finished"]
    assert after_p["prefill"]["leases"] == 0  # every cache was fetched and acked
    assert after_p["prefill"]["released"] == after_p["prefill"]["handovers"]
    assert after_d["decode"]["dresultConnected"] is True


# -- the official clients ------------------------------------------------------------------------


def clients(proc: ServerProcess) -> openai.OpenAI:
    return openai.OpenAI(base_url=proc.http_url + "/v1", api_key="unused", max_retries=0)


def test_openai_client(cluster: dict[str, ServerProcess], mixed: ServerProcess) -> None:
    via, ref = clients(cluster["scheduler"]), clients(mixed)
    kw: dict[str, Any] = {"model": "tiny_llama", "max_tokens": 30, "temperature": 0}
    messages = [{"role": "user", "content": "Tell me a story."}]
    done = via.chat.completions.create(messages=messages, **kw)  # type: ignore[arg-type]
    expected = ref.chat.completions.create(messages=messages, **kw)  # type: ignore[arg-type]
    assert done.choices[0].message.content == expected.choices[0].message.content
    assert done.usage == expected.usage
    text = via.completions.create(prompt="The quick brown", **kw)
    assert (
        text.choices[0].text
        == ref.completions.create(prompt="The quick brown", **kw).choices[0].text
    )
    chunks = list(
        via.chat.completions.create(
            messages=messages,  # type: ignore[arg-type]
            stream=True,
            stream_options={"include_usage": True},
            **kw,
        )
    )
    assert len({c.id for c in chunks}) == 1  # the prefill and decode halves share one id
    assert len({c.created for c in chunks}) == 1
    assert chunks[0].choices[0].delta.role == "assistant"
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == (
        expected.choices[0].message.content
    )
    assert chunks[-1].usage == expected.usage
    assert [m.id for m in via.models.list()] == ["tiny_llama"]


def test_text_generation_client(cluster: dict[str, ServerProcess], mixed: ServerProcess) -> None:
    via = TgiClient(cluster["scheduler"].http_url, timeout=60)
    ref = TgiClient(mixed.http_url, timeout=60)
    done = via.generate("The quick brown", max_new_tokens=20, decoder_input_details=True)
    expected = ref.generate("The quick brown", max_new_tokens=20, decoder_input_details=True)
    assert done.generated_text == expected.generated_text
    got_tokens, want_tokens = done.details.tokens, expected.details.tokens
    assert [(t.id, t.text) for t in got_tokens] == [(t.id, t.text) for t in want_tokens]
    assert [t.logprob for t in got_tokens] == pytest.approx([t.logprob for t in want_tokens])
    assert done.details.prefill == expected.details.prefill
    events = list(via.generate_stream("Once upon a time", max_new_tokens=20))
    assert [e.token.id for e in events] == [
        e.token.id for e in ref.generate_stream("Once upon a time", max_new_tokens=20)
    ]
    assert events[-1].generated_text == "".join(e.token.text for e in events)
    sampled = via.generate("Once upon", max_new_tokens=16, do_sample=True, seed=3)
    assert (
        sampled.generated_text
        == ref.generate("Once upon", max_new_tokens=16, do_sample=True, seed=3).generated_text
    )


# -- family details, compared whole ---------------------------------------------------------------


def both(pd: httpx.Client, ref: httpx.Client, path: str, doc: dict[str, Any]) -> tuple[Any, Any]:
    got, expected = post(pd, path, doc), post(ref, path, doc)
    assert got.status_code == expected.status_code == 200, got.text
    return got.json(), expected.json()


TGI = {"max_new_tokens": 9}
DETAILS = [
    ("/generate", {"inputs": "The quick", "parameters": {**TGI, "decoder_input_details": True}}),
    ("/generate", {"inputs": "The quick brown", "parameters": {**TGI, "return_full_text": True}}),
    ("/", {"inputs": "Once upon a time", "parameters": TGI}),
    ("/generate", {"prompt": "Once upon", "max_tokens": 8, "temperature": 1.2, "n": 3, "seed": 1}),
    ("/generate", {"prompt": "Once upon", "max_tokens": 12, "temperature": 0.8, "seed": 5}),
    ("/infer", {"inputs": "The quick brown", "parameters": {**TGI, "details": True}}),
    ("/infer_token", {"input_id": [1, 450, 300, 101], "parameters": {"max_new_tokens": 5}}),
    (
        "/v2/models/tiny_llama/generate",
        {"id": "req-7", "text_input": "hi", "parameters": {"max_tokens": 6, "details": True}},
    ),
    (
        "/v2/models/tiny_llama/versions/1/generate",
        {"text_input": "Every morning the baker", "max_tokens": 12, "stop_words": ["shop"]},
    ),
]


@pytest.mark.parametrize(("path", "doc"), DETAILS)
def test_family_details_are_the_same(
    pd: httpx.Client, ref: httpx.Client, path: str, doc: dict[str, Any]
) -> None:
    got, expected = both(pd, ref, path, doc)
    assert got == expected


def test_openai_logprobs_stop_and_echo(pd: httpx.Client, ref: httpx.Client) -> None:
    doc = {"model": "tiny_llama", "prompt": "The quick brown", "max_tokens": 12, "temperature": 0}
    for extra in ({"logprobs": 2, "echo": True}, {"stop": [" over"]}, {"n": 2}):
        got, expected = both(pd, ref, "/v1/completions", {**doc, **extra})
        for a, b in zip(got["choices"], expected["choices"], strict=True):
            assert (a["text"], a["finish_reason"]) == (b["text"], b["finish_reason"])
            if a["logprobs"]:
                assert a["logprobs"]["tokens"] == b["logprobs"]["tokens"]
                assert a["logprobs"]["token_logprobs"] == pytest.approx(
                    b["logprobs"]["token_logprobs"], abs=1e-4
                )
        assert got["usage"] == expected["usage"]


@pytest.mark.parametrize("stream", [False, True])
def test_a_one_token_request_ends_at_the_prefill_instance(
    pd: httpx.Client, ref: httpx.Client, stream: bool
) -> None:
    doc = {"inputs": "The quick brown", "stream": stream, "parameters": {"max_new_tokens": 1}}
    if not stream:
        got, expected = both(pd, ref, "/", doc)
        assert got == expected
        return
    _, got_body = stream_body(pd, "/", doc)
    _, expected_body = stream_body(ref, "/", doc)
    (event,) = sse_events(got_body, b"data:", b"{")
    assert got_body == expected_body
    assert orjson.loads(event)["generated_text"] is not None
