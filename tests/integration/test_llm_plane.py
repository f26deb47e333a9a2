"""The generation plane's duties on a real server, through every LLM family: the queue limit
(429 in each family's error shape), the request timeout (504, or the family's error chunk once
a stream began, and the engine's slot freed), a model that is not ready (503), the LLM metrics
on /metrics (vLLM's names), and ``GET /v1/models/{model}`` answering the openai SDK and a TF
Serving status request from one body, for an LLM and for a tensor model."""

from __future__ import annotations

import re
import shutil
import socket
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import openai
import orjson
import pytest

from tests.conftest import EXAMPLES
from tests.serverproc import ServerProcess, served, start_server, wait_for

LIMITED_YAML = """\
runtime: llm
max_queue_size: 1
parameters: {threads: 1, max_num_seqs: 1, max_model_len: 400000}
"""
TIMED_YAML = """\
runtime: llm
default_timeout_microseconds: 1000000
parameters: {threads: 1, max_num_seqs: 1, max_waiting: 0, max_model_len: 400000}
"""
BROKEN_YAML = "runtime: llm\nparameters: {path: /nonexistent/weights}\n"  # never loads
LONG = {"prompt": "Once upon a time", "max_tokens": 300_000, "temperature": 0, "ignore_eos": True}
WAIT_S = 30.0  # upper bound of every wait below (300k tokens take far longer)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    repo = tmp_path_factory.mktemp("llm_plane_repo")
    for name, yaml in (("limited", LIMITED_YAML), ("timed", TIMED_YAML), ("broken", BROKEN_YAML)):
        shutil.copytree(EXAMPLES / "tiny_llama", repo / name)
        (repo / name / "model.yaml").write_text(yaml)
    shutil.copytree(EXAMPLES / "half_plus_two", repo / "half_plus_two")
    yield from served(start_server(repo, "--no-strict-readiness"))


@pytest.fixture(scope="module")
def http(server: ServerProcess) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.http_url, timeout=60) as client:
        yield client


def post(client: httpx.Client, path: str, doc: dict[str, Any]) -> httpx.Response:
    return client.post(path, content=orjson.dumps(doc))


def openai_error(kind: str) -> Callable[[Any], bool]:
    return lambda d: set(d) == {"error"} and d["error"]["type"] == kind


def typed(*kinds: str) -> Callable[[Any], bool]:
    return lambda d: set(d) == {"error", "error_type"} and d["error_type"] in kinds


def bare(d: Any) -> bool:
    return set(d) == {"error"} and isinstance(d["error"], str) and bool(d["error"])


def family_requests(model: str) -> list[tuple[str, dict[str, Any]]]:
    """One small request of each family (and each TGI/vLLM flavour) for ``model``."""
    chat = [{"role": "user", "content": "hi"}]
    return [
        ("/v1/completions", {"model": model, "prompt": "hi", "max_tokens": 2}),
        ("/v1/chat/completions", {"model": model, "messages": chat, "max_tokens": 2}),
        ("/generate", {"model": model, "inputs": "hi", "parameters": {"max_new_tokens": 2}}),
        ("/generate", {"model": model, "prompt": "hi", "max_tokens": 2}),
        (f"/v2/models/{model}/generate", {"text_input": "hi", "max_tokens": 2}),
        ("/infer", {"model": model, "inputs": "hi", "parameters": {"max_new_tokens": 2}}),
    ]


def raw_request(server: ServerProcess, path: str, doc: dict[str, Any]) -> socket.socket:
    host, port = server.http_hostport.rsplit(":", 1)
    sock = socket.create_connection((host, int(port)), timeout=WAIT_S)
    body = orjson.dumps(doc)
    head = f"POST {path} HTTP/1.1\r\nhost: x\r\ncontent-length: {len(body)}\r\n\r\n".encode()
    sock.sendall(head + body)
    return sock


def metric(text: str, name: str, **labels: str) -> float:
    """The sample of ``name`` whose labels include ``labels`` (0 when there is none)."""
    for line in text.splitlines():
        found = re.fullmatch(rf"{re.escape(name)}\{{(.*)\}} (\S+)", line)
        if found and all(f'{k}="{v}"' in found.group(1) for k, v in labels.items()):
            return float(found.group(2))
    return 0.0


# -- admission: the queue limit ----------------------------------------------------------------

OVERLOADED = [
    openai_error("rate_limit_error"),
    openai_error("rate_limit_error"),
    typed("overloaded"),
    typed("Too Many Requests"),
    bare,
    typed("Too Many Requests"),
]


def test_a_request_over_the_queue_limit_is_a_429_in_each_family(
    server: ServerProcess, http: httpx.Client
) -> None:
    running = raw_request(server, "/v1/completions", {**LONG, "model": "limited", "stream": True})
    waiting = raw_request(server, "/v1/completions", {**LONG, "model": "limited", "stream": True})
    inflight = 'rosettaserve_inflight_requests{model="limited",version="1"} 2'
    wait_for(lambda: inflight in http.get("/metrics").text)
    try:
        for (path, doc), shape in zip(family_requests("limited"), OVERLOADED, strict=True):
            reply = post(http, path, doc)
            assert reply.status_code == 429, (path, reply.text)
            assert shape(reply.json()), (path, reply.json())
            assert reply.headers["retry-after"] == "1"
            assert "queued, its limit" in reply.text
    finally:
        running.close()
        waiting.close()
    free = 'rosettaserve_inflight_requests{model="limited",version="1"} 0'
    wait_for(lambda: free in http.get("/metrics").text)  # disconnects cancel both
    assert post(http, *family_requests("limited")[0]).status_code == 200


# -- the request timeout -----------------------------------------------------------------------


def test_the_request_timeout_stops_a_generation_in_each_familys_shape(
    http: httpx.Client,
) -> None:
    reply = post(http, "/v1/completions", {**LONG, "model": "timed"})
    assert reply.status_code == 504
    assert openai_error("server_error")(reply.json())
    assert "request timeout of 1000 ms" in reply.json()["error"]["message"]
    tgi = {"model": "timed", "inputs": "hi", "parameters": {"max_new_tokens": 2}}
    wait_for(lambda: post(http, "/generate", tgi).status_code == 200)  # the slot was freed
    reply = post(http, "/generate", {**LONG, "model": "timed"})  # vLLM's simple API
    assert reply.status_code == 504
    assert typed("Incomplete Generation")(reply.json())
    wait_for(lambda: post(http, "/generate", tgi).status_code == 200)


def test_a_stream_past_the_timeout_ends_with_the_familys_error_chunk(http: httpx.Client) -> None:
    doc = {**LONG, "model": "timed", "stream": True}
    with http.stream("POST", "/v1/completions", content=orjson.dumps(doc)) as r:
        assert r.status_code == 200
        body = b"".join(r.iter_raw())
    events = body[:-2].split(b"\n\n")
    assert events[-1] == b"data: [DONE]"
    error = orjson.loads(events[-2].removeprefix(b"data: "))
    assert openai_error("server_error")(error)
    assert "request timeout" in error["error"]["message"]
    assert len(events) > 3  # tokens went out before the timeout
    mindie = {"model": "timed", "inputs": "hi", "stream": True, "parameters": {"max_new_tokens": 2}}
    wait_for(lambda: post(http, "/infer", mindie).status_code == 200)  # the slot was freed


# -- readiness -----------------------------------------------------------------------------------

UNAVAILABLE = [
    openai_error("server_error"),
    openai_error("server_error"),
    typed("unhealthy"),
    typed("Service Unavailable"),
    bare,
    typed("Service Unavailable"),
]


def test_a_model_that_is_not_ready_is_a_503_in_each_family(http: httpx.Client) -> None:
    for (path, doc), shape in zip(family_requests("broken"), UNAVAILABLE, strict=True):
        reply = post(http, path, doc)
        assert reply.status_code == 503, (path, reply.text)
        assert shape(reply.json()), (path, reply.json())
        assert "not ready" in reply.text


# -- metrics -------------------------------------------------------------------------------------

FAMILY_LABELS = ["openai", "openai", "tgi", "vllm", "triton", "mindie"]


def test_llm_requests_are_counted_on_metrics_with_vllm_names(http: httpx.Client) -> None:
    before = http.get("/metrics").text
    for path, doc in family_requests("limited"):
        assert post(http, path, doc).status_code == 200, path
    after = http.get("/metrics").text
    label = {"model_name": "limited"}

    def grew(name: str, **labels: str) -> float:
        return metric(after, name, **labels) - metric(before, name, **labels)

    for family in set(FAMILY_LABELS):
        success = grew("rosettaserve_requests_total", model="limited", protocol=family,
                       outcome="success")  # fmt: skip
        assert success == FAMILY_LABELS.count(family), family
    assert grew("vllm:e2e_request_latency_seconds_count", **label) >= len(FAMILY_LABELS)
    assert grew("vllm:request_success_total", **label) >= len(FAMILY_LABELS)
    assert grew("vllm:time_to_first_token_seconds_count", **label) >= len(FAMILY_LABELS)
    assert grew("vllm:inter_token_latency_seconds_count", **label) >= 1
    assert grew("vllm:generation_tokens_total", **label) >= 2 * len(FAMILY_LABELS)
    assert grew("vllm:prompt_tokens_total", **label) >= len(FAMILY_LABELS)
    for gauge in ("num_requests_running", "num_requests_waiting", "kv_cache_usage_perc"):
        assert f"# TYPE vllm:{gauge} gauge" in after
        assert f'vllm:{gauge}{{model_name="limited"}}' in after
    assert 0 <= metric(after, "vllm:kv_cache_usage_perc", **label) <= 1
    assert 'vllm:time_to_first_token_seconds_bucket{model_name="limited",le="0.001"}' in after
    assert 'vllm:inter_token_latency_seconds_bucket{model_name="limited",le="0.01"}' in after
    assert 'vllm:e2e_request_latency_seconds_bucket{model_name="limited",le="7680"}' in after


def test_the_status_page_shows_llm_figures(http: httpx.Client) -> None:
    post(http, *family_requests("limited")[0])
    doc = http.get("/status.json").json()
    (model,) = [m for m in doc["models"] if m["name"] == "limited"]
    llm = model["llm"]
    assert llm["ttft"]["count"] >= 1
    assert llm["itl"]["count"] >= 1
    assert llm["e2e"]["count"] >= 1
    assert llm["ttft"]["p50_ms"] is not None
    assert llm["prompt_tokens"] >= 1
    assert model["requests_total"] >= 1  # LLM requests count in the per-model figures
    assert not any("inter-token latency" in note for note in doc["not_measured"])


# -- GET /v1/models/{model}: OpenAI's models.retrieve and TF Serving's status -------------------


@pytest.mark.parametrize("name", ["limited", "half_plus_two"])
def test_one_model_body_answers_the_openai_sdk_and_tf_serving(
    server: ServerProcess, http: httpx.Client, name: str
) -> None:
    client = openai.OpenAI(base_url=server.http_url + "/v1", api_key="unused", max_retries=0)
    card = client.models.retrieve(name)
    assert card.id == name
    assert card.object == "model"
    assert card.owned_by == "rosettaserve"
    assert isinstance(card.created, int)
    assert card.created > 0
    status = http.get(f"/v1/models/{name}").json()["model_version_status"]
    version = "123" if name == "half_plus_two" else "1"
    assert status == [
        {"version": version, "state": "AVAILABLE",
         "status": {"error_code": "OK", "error_message": ""}}
    ]  # fmt: skip
    with pytest.raises(openai.NotFoundError):
        client.models.retrieve("no_such_model")
