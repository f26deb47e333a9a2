"""``runtime: vllm`` through the five LLM API families, against vLLM's own OpenAI server on the
same model: greedy text equal to vLLM's for every family, streaming and not; chat through the
openai SDK; a client that leaves frees its request in vLLM; errors in each family's shape."""

from __future__ import annotations

import time
from collections.abc import Callable

import httpx
import openai
import orjson
import pytest

from tests.serverproc import ServerProcess
from tests_vllm.conftest import MODEL

PROMPTS = ["The quick brown", "Once upon a time", "In the café on the corner", "hi"]
MAX_NEW = 24
Family = Callable[[httpx.Client, str], str]


def post(client: httpx.Client, path: str, doc: dict[str, object]) -> httpx.Response:
    return client.post(
        path, content=orjson.dumps(doc), headers={"content-type": "application/json"}
    )


def events(client: httpx.Client, path: str, doc: dict[str, object]) -> list[bytes]:
    """A stream's SSE payloads (``data:`` with or without its space), ``[DONE]`` left out."""
    with client.stream("POST", path, content=orjson.dumps(doc)) as r:
        assert r.status_code == 200, r.read()
        body = b"".join(r.iter_raw())
    payloads = [e.removeprefix(b"data:").strip() for e in body.split(b"\n\n") if e.strip()]
    return [p for p in payloads if p != b"[DONE]"]


def completion(client: httpx.Client, prompt: str) -> str:
    doc = {"model": MODEL, "prompt": prompt, "max_tokens": MAX_NEW, "temperature": 0}
    return str(post(client, "/v1/completions", doc).json()["choices"][0]["text"])


def completion_stream(client: httpx.Client, prompt: str) -> str:
    doc = {"model": MODEL, "prompt": prompt, "max_tokens": MAX_NEW, "temperature": 0}
    chunks = events(client, "/v1/completions", {**doc, "stream": True})
    return "".join(orjson.loads(e)["choices"][0]["text"] for e in chunks)


def tgi(client: httpx.Client, prompt: str) -> str:
    doc = {"inputs": prompt, "parameters": {"max_new_tokens": MAX_NEW}}
    return str(post(client, "/generate", doc).json()["generated_text"])


def tgi_stream(client: httpx.Client, prompt: str) -> str:
    doc = {"inputs": prompt, "parameters": {"max_new_tokens": MAX_NEW}}
    return "".join(
        orjson.loads(e)["token"]["text"] for e in events(client, "/generate_stream", doc)
    )


def vllm_generate(client: httpx.Client, prompt: str) -> str:
    doc = {"prompt": prompt, "max_tokens": MAX_NEW, "temperature": 0}
    (text,) = post(client, "/generate", doc).json()["text"]
    return str(text).removeprefix(prompt)


def vllm_generate_stream(client: httpx.Client, prompt: str) -> str:
    doc = {"prompt": prompt, "max_tokens": MAX_NEW, "temperature": 0, "stream": True}
    with client.stream("POST", "/generate", content=orjson.dumps(doc)) as r:
        lines = b"".join(r.iter_raw()).splitlines()
    return str(orjson.loads(lines[-1])["text"][0]).removeprefix(prompt)  # cumulative


def triton(client: httpx.Client, prompt: str) -> str:
    doc = {"text_input": prompt, "parameters": {"max_tokens": MAX_NEW}}
    return str(post(client, f"/v2/models/{MODEL}/generate", doc).json()["text_output"])


def triton_stream(client: httpx.Client, prompt: str) -> str:
    doc = {"text_input": prompt, "max_tokens": MAX_NEW}
    path = f"/v2/models/{MODEL}/generate_stream"
    return "".join(orjson.loads(e)["text_output"] for e in events(client, path, doc))


def mindie(client: httpx.Client, prompt: str) -> str:
    doc = {"inputs": prompt, "parameters": {"max_new_tokens": MAX_NEW}}
    return str(post(client, "/infer", doc).json()["generated_text"])


def mindie_stream(client: httpx.Client, prompt: str) -> str:
    doc = {"inputs": prompt, "stream": True, "parameters": {"max_new_tokens": MAX_NEW}}
    return str(orjson.loads(events(client, "/infer", doc)[-1])["generated_text"])


def oip(client: httpx.Client, prompt: str) -> str:
    tensor = {"name": "text_input", "datatype": "BYTES", "shape": [1], "data": [prompt]}
    doc = {"inputs": [tensor], "parameters": {"max_tokens": MAX_NEW}}
    (out,) = post(client, f"/v2/models/{MODEL}/infer", doc).json()["outputs"]
    return str(out["data"][0])


FAMILIES: dict[str, Family] = {
    "openai": completion,
    "openai-stream": completion_stream,
    "tgi": tgi,
    "tgi-stream": tgi_stream,
    "vllm": vllm_generate,
    "vllm-stream": vllm_generate_stream,
    "triton": triton,
    "triton-stream": triton_stream,
    "mindie": mindie,
    "mindie-stream": mindie_stream,
    "oip": oip,
}


@pytest.fixture(scope="module")
def reference(vllm_http: httpx.Client) -> dict[str, str]:
    """What vLLM's own server answers (its /v1/completions, greedy)."""
    return {p: completion(vllm_http, p) for p in PROMPTS}


def test_vllms_own_answers_are_real_text(reference: dict[str, str]) -> None:
    assert reference["The quick brown"].startswith(" fox")  # what the tiny model learned
    assert len(set(reference.values())) == len(PROMPTS)


@pytest.mark.parametrize("family", FAMILIES)
def test_every_family_answers_what_vllm_answers(
    http: httpx.Client, reference: dict[str, str], family: str
) -> None:
    assert {p: FAMILIES[family](http, p) for p in PROMPTS} == reference


def test_chat_through_the_openai_sdk_equals_vllms(rosetta: ServerProcess, vllm_url: str) -> None:
    messages: list[dict[str, str]] = [{"role": "user", "content": "Tell me about the fox"}]
    answers = []
    for url in (rosetta.http_url, vllm_url):
        client = openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0)
        reply = client.chat.completions.create(
            model=MODEL, messages=messages, max_tokens=MAX_NEW, temperature=0
        )
        chunks = client.chat.completions.create(
            model=MODEL,
            messages=messages,
            max_tokens=MAX_NEW,
            temperature=0,
            stream=True,
        )
        streamed = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        assert streamed == reply.choices[0].message.content
        answers.append((streamed, reply.usage.completion_tokens if reply.usage else None))
    assert answers[0] == answers[1]
    assert answers[0][0]


def gauge(http: httpx.Client, name: str) -> float:
    for line in http.get("/metrics").text.splitlines():
        if line.startswith(f'{name}{{model_name="{MODEL}"'):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{name} is not in /metrics")


def engine_figure(http: httpx.Client, key: str) -> int:
    """One of the engine's counters on the status page's document."""
    for model in http.get("/status.json").json()["models"]:
        llm = model.get("llm") or {}
        if key in llm:
            return int(llm[key])
    raise AssertionError(f"no engine figure {key!r} in /status.json")


def test_a_client_that_leaves_frees_its_request_in_vllm(
    rosetta: ServerProcess, http: httpx.Client
) -> None:
    doc = {"model": MODEL, "prompt": "Once", "max_tokens": 400, "ignore_eos": True, "stream": True}
    aborted = engine_figure(http, "cancelled")
    with (
        httpx.Client(base_url=rosetta.http_url, timeout=60) as client,
        client.stream("POST", "/v1/completions", content=orjson.dumps(doc)) as r,
    ):
        chunks = r.iter_raw()
        next(chunks)
        next(chunks)
        assert gauge(http, "vllm:num_requests_running") == 1
    deadline = time.monotonic() + 30
    while gauge(http, "vllm:num_requests_running") and time.monotonic() < deadline:
        time.sleep(0.05)
    assert gauge(http, "vllm:num_requests_running") == 0  # vLLM holds it no more
    assert engine_figure(http, "cancelled") == aborted + 1  # aborted, not run to its end
    assert completion(http, "hi")  # and it serves on


TOO_LONG = " ".join(["fox"] * 600)  # over the 512-token context window


@pytest.mark.parametrize(
    ("path", "doc", "field"),
    [
        ("/v1/completions", {"model": MODEL, "prompt": TOO_LONG, "max_tokens": 4}, "error"),
        ("/generate", {"inputs": TOO_LONG, "parameters": {"max_new_tokens": 4}}, "error"),
        ("/generate", {"prompt": TOO_LONG, "max_tokens": 4}, "error"),
        (f"/v2/models/{MODEL}/generate", {"text_input": TOO_LONG}, "error"),
        ("/infer", {"inputs": TOO_LONG, "parameters": {"max_new_tokens": 4}}, "error"),
    ],
)
def test_a_prompt_too_long_is_the_familys_error(
    http: httpx.Client, path: str, doc: dict[str, object], field: str
) -> None:
    r = post(http, path, doc)
    assert 400 <= r.status_code < 500, r.text
    body = r.json()
    assert field in body
    assert "context window" in r.text
    assert completion(http, "hi")  # and it serves on


def test_openai_too_long_status_is_vllms(http: httpx.Client, vllm_http: httpx.Client) -> None:
    doc = {"model": MODEL, "prompt": TOO_LONG, "max_tokens": 4}
    ours, theirs = post(http, "/v1/completions", doc), post(vllm_http, "/v1/completions", doc)
    assert ours.status_code == theirs.status_code == 400
    assert set(ours.json()["error"]) >= {"message", "type", "code"}  # OpenAI's error object
    assert "message" in theirs.json()["error"]


def test_prompt_logprobs_and_chat_template_kwargs_are_vllms(
    http: httpx.Client, vllm_http: httpx.Client
) -> None:
    """vLLM computes prompt logprobs for runtime: vllm; they come back as vLLM's own server
    sends them (each choice of a completion, beside the choices of a chat reply), and chat
    template variables reach the template as in vLLM."""
    doc = {"model": MODEL, "prompt": "The quick brown", "max_tokens": 2, "temperature": 0,
           "prompt_logprobs": 2}  # fmt: skip
    ours, theirs = (
        post(c, "/v1/completions", doc).json()["choices"][0]["prompt_logprobs"]
        for c in (http, vllm_http)
    )
    assert ours[0] is None
    assert theirs[0] is None
    assert [sorted(place) for place in ours[1:]] == [sorted(place) for place in theirs[1:]]
    for mine, vllms in zip(ours[1:], theirs[1:], strict=True):
        for token, entry in mine.items():
            assert entry["logprob"] == pytest.approx(vllms[token]["logprob"], abs=1e-3)
            assert entry["rank"] == vllms[token]["rank"]
            assert entry["decoded_token"] == vllms[token]["decoded_token"]
    chat = {"model": MODEL, "messages": [{"role": "user", "content": "Tell me about the fox"}],
            "max_tokens": 8, "temperature": 0, "prompt_logprobs": 1,
            "chat_template_kwargs": {"add_generation_prompt": False}}  # fmt: skip
    mine_chat, vllms_chat = (
        post(c, "/v1/chat/completions", chat).json() for c in (http, vllm_http)
    )
    assert mine_chat["usage"]["prompt_tokens"] == vllms_chat["usage"]["prompt_tokens"]
    assert len(mine_chat["prompt_logprobs"]) == mine_chat["usage"]["prompt_tokens"]
    assert [sorted(p or {}) for p in mine_chat["prompt_logprobs"]] == [
        sorted(p or {}) for p in vllms_chat["prompt_logprobs"]
    ]
    content = [c["choices"][0]["message"]["content"] for c in (mine_chat, vllms_chat)]
    assert content[0] == content[1]
