"""Bad input to each LLM family: a 400 (404 for an unknown model) in that family's own error
shape, never a 500 or a hang, and the server keeps serving."""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import orjson
import pytest

from tests.conftest import EXAMPLES
from tests.serverproc import ServerProcess, served, start_server

LONG = "word " * 600  # more tokens than the 512-token context window


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    repo = tmp_path_factory.mktemp("llm_bad_repo")
    for name in ("tiny_llama", "text_python"):
        shutil.copytree(EXAMPLES / name, repo / name)
    yield from served(start_server(repo))


@pytest.fixture(scope="module")
def http(server: ServerProcess) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.http_url, timeout=60) as client:
        yield client


def openai_shape(doc: Any) -> bool:
    error = doc.get("error")
    return (
        set(doc) == {"error"}
        and isinstance(error, dict)
        and set(error) == {"message", "type", "param", "code"}
        and isinstance(error["message"], str)
        and bool(error["message"])
    )


def tgi_shape(doc: Any) -> bool:
    return set(doc) == {"error", "error_type"} and doc["error_type"] == "validation"


def mindie_shape(doc: Any) -> bool:  # vLLM's route answers in MindIE's shape too
    return set(doc) == {"error", "error_type"} and doc["error_type"] in {
        "Bad Request",
        "NotFoundError",
    }


def anthropic_shape(doc: Any) -> bool:
    error = doc.get("error")
    return (
        set(doc) == {"type", "error"}
        and doc["type"] == "error"
        and isinstance(error, dict)
        and set(error) == {"type", "message"}
        and error["type"] in ("invalid_request_error", "not_found_error")
        and bool(error["message"])
    )


def triton_shape(doc: Any) -> bool:
    return set(doc) == {"error"} and isinstance(doc["error"], str) and bool(doc["error"])


Shape = Callable[[Any], bool]
CHAT = "/v1/chat/completions"
DONE = "/v1/completions"
MSGS = [{"role": "user", "content": "hi"}]


def oa(**kw: Any) -> dict[str, Any]:
    return {"model": "tiny_llama", "prompt": "hi", **kw}


def chat(**kw: Any) -> dict[str, Any]:
    return {"model": "tiny_llama", "messages": MSGS, **kw}


def tgi(parameters: dict[str, Any] | None = None, **kw: Any) -> dict[str, Any]:
    return {"inputs": "hi", "parameters": parameters or {}, **kw}


def vllm(**kw: Any) -> dict[str, Any]:
    return {"prompt": "hi", **kw}


def triton(parameters: dict[str, Any] | None = None, **kw: Any) -> dict[str, Any]:
    return {"text_input": "hi", "parameters": parameters or {}, **kw}


def resp(**kw: Any) -> dict[str, Any]:
    return {"model": "tiny_llama", "input": "hi", **kw}


def msg(**kw: Any) -> dict[str, Any]:
    return {"model": "tiny_llama", "max_tokens": 8, "messages": MSGS, **kw}


RESP, MSG, COUNT = "/v1/responses", "/v1/messages", "/v1/messages/count_tokens"
GEN = "/v2/models/tiny_llama/generate"
GEN_STREAM = "/v2/models/tiny_llama/generate_stream"
CASES: list[tuple[str, str, Any, int, Shape]] = [
    # OpenAI
    ("malformed json", DONE, b'{"model": "tiny_llama", "prompt": ', 400, openai_shape),
    ("not an object", CHAT, [1, 2], 400, openai_shape),
    ("no model", DONE, {"prompt": "hi"}, 400, openai_shape),
    ("model type", CHAT, chat(model=5), 400, openai_shape),
    ("unknown model", CHAT, chat(model="nope"), 404, openai_shape),
    ("not an llm", DONE, oa(model="text_python"), 400, openai_shape),
    ("negative max_tokens", DONE, oa(max_tokens=-1), 400, openai_shape),
    ("huge max_tokens", CHAT, chat(max_tokens=10**9), 400, openai_shape),
    ("max_tokens type", DONE, oa(max_tokens="ten"), 400, openai_shape),
    ("top_p zero", CHAT, chat(top_p=0), 400, openai_shape),
    ("top_p above one", DONE, oa(top_p=1.5), 400, openai_shape),
    ("negative temperature", CHAT, chat(temperature=-0.5), 400, openai_shape),
    ("n beyond the cap", DONE, oa(n=99), 400, openai_shape),
    ("prompt too long", DONE, oa(prompt=LONG), 400, openai_shape),
    ("too long, streaming", CHAT, chat(messages=[{"role": "user", "content": LONG}],
                                       stream=True), 400, openai_shape),
    ("stream_options alone", CHAT, chat(stream_options={"include_usage": True}), 400, openai_shape),
    ("no messages", CHAT, chat(messages=[]), 400, openai_shape),
    ("bad role", CHAT, chat(messages=[{"role": "robot", "content": "x"}]), 400, openai_shape),
    ("stop type", DONE, oa(stop=5), 400, openai_shape),
    ("empty prompt", DONE, oa(prompt=""), 400, openai_shape),
    ("token id out of range", DONE, oa(prompt=[1, 99999]), 400, openai_shape),
    ("tools", CHAT, chat(tools=[{"type": "function"}]), 400, openai_shape),
    # TGI
    ("malformed json", "/generate", b"{inputs", 400, tgi_shape),
    ("neither inputs nor prompt", "/generate", {"text": "hi"}, 400, tgi_shape),
    ("inputs type", "/generate", tgi(inputs=5), 400, tgi_shape),
    ("negative max_new_tokens", "/generate", tgi({"max_new_tokens": -1}), 400, tgi_shape),
    ("huge max_new_tokens", "/generate_stream", tgi({"max_new_tokens": 10**6}), 400, tgi_shape),
    ("top_p zero", "/generate", tgi({"top_p": 0}), 400, tgi_shape),
    ("top_p above one", "/generate_stream", tgi({"top_p": 1.01}), 400, tgi_shape),
    ("temperature zero", "/generate", tgi({"temperature": 0}), 400, tgi_shape),
    ("prompt too long", "/generate", tgi(inputs=LONG), 400, tgi_shape),
    ("parameters type", "/", tgi(parameters=[1]), 400, tgi_shape),
    ("best_of", "/", tgi({"best_of": 2, "do_sample": True}), 400, tgi_shape),
    # vLLM (on /generate, told apart by `prompt`)
    ("zero max_tokens", "/generate", vllm(max_tokens=0), 400, mindie_shape),
    ("unknown key", "/generate", vllm(max_new_tokens=5), 400, mindie_shape),
    ("negative temperature", "/generate", vllm(temperature=-1), 400, mindie_shape),
    ("n beyond the cap", "/generate", vllm(n=99), 400, mindie_shape),
    ("top_p zero", "/generate", vllm(top_p=0.0), 400, mindie_shape),
    ("prompt type", "/generate", vllm(prompt=["a"]), 400, mindie_shape),
    ("prompt too long", "/generate", vllm(prompt=LONG, stream=True), 400, mindie_shape),
    ("unknown model", "/generate", vllm(model="nope"), 404, mindie_shape),
    # Triton generate
    ("malformed json", GEN, b"[", 400, triton_shape),
    ("no text_input", GEN, {"parameters": {}}, 400, triton_shape),
    ("unknown model", "/v2/models/nope/generate", triton(), 404, triton_shape),
    ("not an llm", "/v2/models/text_python/generate", triton(), 400, triton_shape),
    ("negative max_tokens", GEN_STREAM, triton({"max_tokens": -5}), 400, triton_shape),
    ("top_p above one", GEN, triton(top_p=2.0), 400, triton_shape),
    ("prompt too long", GEN_STREAM, triton(text_input=LONG), 400, triton_shape),
    ("unknown version", "/v2/models/tiny_llama/versions/9/generate", triton(), 404, triton_shape),
    # MindIE native
    ("malformed json", "/infer", b"{", 400, mindie_shape),
    ("input conflict", "/infer", {"inputs": "hi", "input_id": [1]}, 400, mindie_shape),
    ("no input", "/infer_token", {"parameters": {}}, 400, mindie_shape),
    ("input_id type", "/infer_token", {"input_id": ["a"]}, 400, mindie_shape),
    ("zero max_new_tokens", "/infer", tgi({"max_new_tokens": 0}), 400, mindie_shape),
    ("top_p zero", "/infer", tgi({"top_p": 0}, stream=True), 400, mindie_shape),
    ("prompt too long", "/infer", tgi(inputs=LONG), 400, mindie_shape),
    # OpenAI Responses
    ("malformed json", RESP, b"{", 400, openai_shape),
    ("no input", RESP, resp(input=None), 400, openai_shape),
    ("unknown model", RESP, resp(model="nope"), 404, openai_shape),
    ("not an llm", RESP, resp(model="text_python"), 400, openai_shape),
    ("zero max_output_tokens", RESP, resp(max_output_tokens=0), 400, openai_shape),
    ("prompt too long, streaming", RESP, resp(input=LONG, stream=True), 400, openai_shape),
    ("unknown previous response", RESP, resp(previous_response_id="resp_x"), 404, openai_shape),
    # Anthropic Messages
    ("malformed json", MSG, b"[", 400, anthropic_shape),
    ("no max_tokens", MSG, {"model": "tiny_llama", "messages": MSGS}, 400, anthropic_shape),
    ("unknown model", MSG, msg(model="nope"), 404, anthropic_shape),
    ("not an llm", COUNT, msg(model="text_python"), 400, anthropic_shape),
    ("temperature above one", MSG, msg(temperature=1.5), 400, anthropic_shape),
    ("prompt too long, streaming", MSG, msg(messages=[{"role": "user", "content": LONG}],
                                            stream=True), 400, anthropic_shape),
    ("no messages", COUNT, msg(messages=[]), 400, anthropic_shape),
]  # fmt: skip


@pytest.mark.parametrize("case", CASES, ids=[f"{c[1]}: {c[0]}" for c in CASES])
def test_bad_input_gets_the_familys_error(
    http: httpx.Client, case: tuple[str, str, Any, int, Shape]
) -> None:
    _, path, body, status, shape = case
    content = body if isinstance(body, bytes) else orjson.dumps(body)
    reply = http.post(path, content=content, headers={"content-type": "application/json"})
    assert reply.status_code == status, reply.text
    assert reply.headers["content-type"] == "application/json"
    assert shape(reply.json()), reply.json()


@pytest.mark.parametrize(
    ("ids", "message"),
    [
        ([-1], "Parameter input_id holds token id -1, which is out of the vocabulary"),
        ([5, -7], "token id -7, which is out of the vocabulary"),
        (["a"], "Parameter input_id must be integer"),
        ([1.0], "Parameter input_id must be integer"),
        ([10**6], "token id 1000000 is out of range [0, "),  # past the end: the engine says so
    ],
)
def test_mindie_input_id_errors_name_the_real_fault(
    http: httpx.Client, ids: list[Any], message: str
) -> None:
    reply = http.post("/infer_token", content=orjson.dumps({"input_id": ids}))
    assert reply.status_code == 400, reply.text
    assert message in reply.json()["error"]


def test_the_server_keeps_serving_every_family(http: httpx.Client) -> None:
    for path, body in [
        (DONE, oa(max_tokens=2)),
        (CHAT, chat(max_tokens=2)),
        ("/generate", tgi({"max_new_tokens": 2})),
        ("/generate", vllm(max_tokens=2)),
        (GEN, triton({"max_tokens": 2})),
        ("/infer", tgi({"max_new_tokens": 2})),
        (RESP, resp(max_output_tokens=2)),
        (MSG, msg(max_tokens=2)),
    ]:
        reply = http.post(path, content=orjson.dumps(body))
        assert reply.status_code == 200, (path, reply.text)
    assert http.get("/v2/health/ready").status_code == 200
