"""Ordinary clients through the scheduler: every LLM family with the defaults of requests, httpx
and the openai SDK (all of which send ``Accept-Encoding: gzip``), with gzip-compressed request
bodies, and with answers large enough to be compressed on the way (``n`` > 1, long answers that
end at the prefill instance, streamed ``top_logprobs``): each answer is the mixed instance's.

The scheduler inflates a compressed body once and forwards it as it is; it asks the prefill
instance for an uncoded reply, and codes its own reply as its client accepts."""

from __future__ import annotations

import gzip
import math
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import openai
import orjson
import pytest
import requests

from tests.pdproc import llm_repo, start_instance, start_scheduler
from tests.serverproc import ServerProcess, served, start_server, stop_cleanly

LONG_PROMPT = "The quick brown fox jumps over the lazy dog by the river bank. " * 20
LONG_ID = "request-" + "x" * 1500  # Triton echoes the client's id in every reply
MODEL = "tiny_llama"
CHAT = [{"role": "user", "content": "Tell me a story."}]
MINDIE = ("/infer", "/infer_token")
SEEDED = {"temperature": 0.9, "seed": 11}
GREEDY = {"temperature": 0}


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return llm_repo(tmp_path_factory.mktemp("pd_clients_repo"))


@pytest.fixture(scope="module")
def mixed(repo: Path) -> Iterator[ServerProcess]:
    yield from served(start_server(repo))


@pytest.fixture(scope="module")
def scheduler(repo: Path) -> Iterator[ServerProcess]:
    p = start_instance(repo, "prefill")
    d = start_instance(repo, "decode")
    s = start_scheduler([p], [d], "--policy", "round-robin")
    yield s
    for proc in (s, p, d):
        stop_cleanly(proc)


# (path, body): one case per family and shape; all but MindIE's are larger than the 1 KiB above
# which a server compresses its reply for a client that accepts gzip (MindIE's replies carry
# the generated text only, which this small model ends early)
CASES: list[tuple[str, dict[str, Any]]] = [
    ("/v1/completions", {"model": MODEL, "prompt": "Once", "max_tokens": 40, "n": 8, **SEEDED}),
    (
        "/v1/chat/completions",
        {"model": MODEL, "messages": CHAT, "max_tokens": 40, "n": 8, **SEEDED},
    ),
    (
        "/v1/chat/completions",
        {
            "model": MODEL,
            "messages": CHAT,
            "max_tokens": 12,
            "temperature": 0,
            "stream": True,
            "logprobs": True,
            "top_logprobs": 20,
        },
    ),
    (
        "/v1/completions",
        {
            "model": MODEL,
            "prompt": LONG_PROMPT,
            "max_tokens": 6,
            "temperature": 0,
            "stream": True,
            "echo": True,
            "logprobs": 5,
        },
    ),
    (
        "/v1/completions",
        {"model": MODEL, "prompt": LONG_PROMPT, "max_tokens": 1, "echo": True, **GREEDY},
    ),
    (
        "/generate",
        {"inputs": LONG_PROMPT, "parameters": {"max_new_tokens": 1, "return_full_text": True}},
    ),
    (
        "/generate",
        {
            "inputs": "The quick",
            "parameters": {"max_new_tokens": 30, "details": True, "decoder_input_details": True},
        },
    ),
    (
        "/generate_stream",
        {"inputs": LONG_PROMPT, "parameters": {"max_new_tokens": 1, "return_full_text": True}},
    ),
    ("/", {"inputs": LONG_PROMPT, "parameters": {"max_new_tokens": 1, "return_full_text": True}}),
    ("/generate", {"prompt": LONG_PROMPT, "max_tokens": 4, "n": 2, **SEEDED}),
    ("/generate", {"prompt": LONG_PROMPT, "max_tokens": 6, "temperature": 0, "stream": True}),
    ("/generate", {"prompt": LONG_PROMPT, "max_tokens": 1, **GREEDY}),
    (f"/v2/models/{MODEL}/generate", {"id": LONG_ID, "text_input": "hi", "max_tokens": 1}),
    (f"/v2/models/{MODEL}/generate", {"id": LONG_ID, "text_input": "hi", "max_tokens": 9}),
    (f"/v2/models/{MODEL}/generate_stream", {"id": LONG_ID, "text_input": "hi", "max_tokens": 6}),
    (
        "/infer",
        {"inputs": "Once upon a time", "parameters": {"max_new_tokens": 30, "details": True}},
    ),
    ("/infer", {"inputs": "Once upon a time", "stream": True, "parameters": {"max_new_tokens": 9}}),
    ("/infer_token", {"input_id": [1, 450, 300, 101], "parameters": {"max_new_tokens": 9}}),
]
CASE_IDS = [f"{path} {sorted(doc)}" for path, doc in CASES]


def comparable(body: bytes) -> Any:
    """A reply (JSON, SSE or vLLM's NDJSON stream) without what differs from one server or one
    run to the next: an OpenAI reply's id and creation time, MindIE's step timings."""
    if body.startswith(b"data:"):
        events = [e.removeprefix(b"data:").strip() for e in body.split(b"\n\n") if e]
        return [e if e == b"[DONE]" else _stable(orjson.loads(e)) for e in events]
    if b"\n" in body.rstrip(b"\n"):
        return [_stable(orjson.loads(line)) for line in body.splitlines()]
    return _stable(orjson.loads(body))


def _stable(doc: Any) -> Any:
    if isinstance(doc, dict):
        skip = {"id", "created", "prefill_time", "decode_time"} & set(doc)
        if doc.get("object", "").startswith(("chat.", "text_")):
            return {k: _stable(v) for k, v in doc.items() if k not in skip}
        return {k: _stable(v) for k, v in doc.items() if k not in skip - {"id"}}
    if isinstance(doc, list):
        return [_stable(v) for v in doc]
    return doc


def close(got: Any, want: Any) -> bool:
    """The same replies, logprobs within 1e-3 (a batch shared with other requests moves their
    last digits)."""
    if isinstance(want, float) and isinstance(got, float):
        return math.isclose(got, want, abs_tol=1e-3)
    if isinstance(want, dict) and isinstance(got, dict):
        return got.keys() == want.keys() and all(close(got[k], want[k]) for k in want)
    if isinstance(want, list) and isinstance(got, list):
        return len(got) == len(want) and all(map(close, got, want))
    return bool(got == want)


def plain(url: str, path: str, doc: dict[str, Any]) -> bytes:
    """The reply as a client that asks for no coding gets it."""
    headers = {"content-type": "application/json", "accept-encoding": "identity"}
    r = httpx.post(url + path, content=orjson.dumps(doc), headers=headers, timeout=60)
    assert r.status_code == 200, r.text
    assert "content-encoding" not in r.headers
    return r.content


@pytest.fixture(scope="module")
def expected(mixed: ServerProcess) -> dict[int, bytes]:
    replies = {i: plain(mixed.http_url, path, doc) for i, (path, doc) in enumerate(CASES)}
    large = [len(body) > 1024 for i, body in replies.items() if CASES[i][0] not in MINDIE]
    assert all(large)  # each is worth compressing
    return replies


@pytest.mark.parametrize("case", range(len(CASES)), ids=CASE_IDS)
def test_requests_defaults(scheduler: ServerProcess, expected: dict[int, bytes], case: int) -> None:
    path, doc = CASES[case]
    r = requests.post(scheduler.http_url + path, json=doc, timeout=60)
    assert "gzip" in r.request.headers["accept-encoding"]
    assert r.status_code == 200, r.text
    assert comparable(r.content) == comparable(expected[case])
    whole = r.headers["content-type"] == "application/json"  # not a stream
    coded = whole and len(expected[case]) >= 1024  # by the scheduler's own transport
    assert r.headers.get("content-encoding") == ("gzip" if coded else None)


@pytest.mark.parametrize("case", range(len(CASES)), ids=CASE_IDS)
def test_httpx_defaults_with_a_gzip_body(
    scheduler: ServerProcess, expected: dict[int, bytes], case: int
) -> None:
    path, doc = CASES[case]
    headers = {"content-type": "application/json", "content-encoding": "gzip"}
    with httpx.Client(timeout=60) as client:
        r = client.post(scheduler.http_url + path, content=gzip.compress(orjson.dumps(doc)),
                        headers=headers)  # fmt: skip
    assert r.status_code == 200, r.text
    assert comparable(r.content) == comparable(expected[case])


def test_a_deflate_body_and_a_stream_read_by_httpx(
    scheduler: ServerProcess, expected: dict[int, bytes]
) -> None:
    import zlib

    index = next(i for i, (_, doc) in enumerate(CASES) if "top_logprobs" in doc)
    path, doc = CASES[index]
    headers = {"content-encoding": "deflate", "content-type": "application/json"}
    with (
        httpx.Client(timeout=60) as client,
        client.stream(
            "POST",
            scheduler.http_url + path,
            content=zlib.compress(orjson.dumps(doc)),
            headers=headers,
        ) as r,  # fmt: skip
    ):
        assert r.status_code == 200
        body = b"".join(r.iter_bytes())
    assert comparable(body) == comparable(expected[index])


def test_the_openai_sdk(scheduler: ServerProcess, mixed: ServerProcess) -> None:
    def client(proc: ServerProcess) -> openai.OpenAI:
        return openai.OpenAI(base_url=proc.http_url + "/v1", api_key="unused", max_retries=0)

    via, ref = client(scheduler), client(mixed)
    kw: dict[str, Any] = {"model": MODEL, "max_tokens": 40, "temperature": 0.9, "seed": 4}
    for n in (1, 3):
        got = via.chat.completions.create(messages=CHAT, n=n, **kw)  # type: ignore[arg-type]
        want = ref.chat.completions.create(messages=CHAT, n=n, **kw)  # type: ignore[arg-type]
        assert [c.message.content for c in got.choices] == [c.message.content for c in want.choices]
        assert got.usage == want.usage
    got_text = via.completions.create(prompt=LONG_PROMPT, **{**kw, "max_tokens": 1}, echo=True)
    want_text = ref.completions.create(prompt=LONG_PROMPT, **{**kw, "max_tokens": 1}, echo=True)
    assert got_text.choices[0].text == want_text.choices[0].text
    streamed = via.chat.completions.create(
        messages=CHAT,  # type: ignore[arg-type]
        stream=True,
        logprobs=True,
        top_logprobs=20,
        **kw,
    )
    chunks = [c for c in streamed if c.choices]
    reference = ref.chat.completions.create(messages=CHAT, logprobs=True, top_logprobs=20, **kw)  # type: ignore[arg-type]
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == (
        reference.choices[0].message.content
    )
    tops = [t for c in chunks if c.choices[0].logprobs for t in c.choices[0].logprobs.content or []]
    assert reference.choices[0].logprobs is not None
    want_tops = reference.choices[0].logprobs.content or []
    assert [[a.token for a in t.top_logprobs] for t in tops] == [
        [a.token for a in t.top_logprobs] for t in want_tops
    ]


def test_the_worst_codings_beside_a_normal_client(
    scheduler: ServerProcess, expected: dict[int, bytes]
) -> None:
    """Bodies coded twice or broken, codings refused, hop-by-hop and PD fields a client should
    not send: each is answered on its own (200 or the family's 4xx, never a 500), and a
    normal client's stream beside them is exactly what it is alone."""
    normal = next(i for i, (_, doc) in enumerate(CASES) if "top_logprobs" in doc)
    path, doc = CASES[normal]
    body = orjson.dumps(doc)
    json_type = {"content-type": "application/json"}
    worst = [
        (gzip.compress(gzip.compress(body)), {"content-encoding": "gzip, gzip"}, 200),
        (gzip.compress(body)[:-9], {"content-encoding": "gzip"}, 400),  # cut short
        (body, {"content-encoding": "br"}, 415),
        (body, {"accept-encoding": "gzip;q=0, br", "connection": "content-type, x-a",
                "x-a": "1", "req-id": "1", "d-target": "127.0.0.1;9", "is-recompute": "true"},
         200),
    ]  # fmt: skip

    def send(item: tuple[bytes, dict[str, str], int]) -> tuple[int, bytes, dict[str, str]]:
        content, headers, _ = item
        r = httpx.post(scheduler.http_url + path, content=content, headers=json_type | headers,
                       timeout=60)  # fmt: skip
        return r.status_code, r.content, dict(r.headers)

    with ThreadPoolExecutor(len(worst) + 1) as pool:
        alone = pool.submit(plain, scheduler.http_url, path, doc)
        answers = list(pool.map(send, worst))
        assert close(comparable(alone.result()), comparable(expected[normal]))
    for (status, content, headers), (_, _, want) in zip(answers, worst, strict=True):
        assert status == want, content[:300]
        if status == 200:
            assert "content-encoding" not in headers
            assert close(comparable(content), comparable(expected[normal]))
