"""A method a route does not serve answers 405 with ``Allow``, in the error shape of the protocol
the path belongs to (grps's status, OpenAI's error object, TGI's error and error_type, OIP's and
vLLM's ``{"error": ...}``), on a real server; the server keeps serving."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import openai
import pytest

from tests.serverproc import ServerProcess

TIMEOUT_S = 30.0


def grps_shape(doc: Any) -> str:
    assert doc["status"]["code"] == 405
    assert doc["status"]["status"] == "FAILURE"
    return str(doc["status"]["msg"])


def openai_shape(doc: Any) -> str:
    assert set(doc["error"]) >= {"message", "type", "code"}
    return str(doc["error"]["message"])


def tgi_shape(doc: Any) -> str:
    assert set(doc) == {"error", "error_type"}
    return str(doc["error"])


def plain_shape(doc: Any) -> str:  # OIP, TF Serving, vLLM, the metrics page
    assert set(doc) == {"error"}
    assert isinstance(doc["error"], str)
    return str(doc["error"])


CASES: list[tuple[str, str, str, Callable[[Any], str]]] = [
    ("POST", "/grps/v1/monitor/metrics", "GET, HEAD", grps_shape),
    ("DELETE", "/grps/v1/monitor/series", "GET, HEAD", grps_shape),
    ("PUT", "/grps/v1/health/live", "GET, HEAD, POST", grps_shape),
    ("GET", "/v1/chat/completions", "POST", openai_shape),
    ("GET", "/v1/completions", "POST", openai_shape),
    ("POST", "/v1/models", "GET, HEAD", openai_shape),
    ("GET", "/v1/embeddings", "POST", openai_shape),
    ("GET", "/v1/rerank", "POST", openai_shape),
    ("GET", "/embed", "POST", tgi_shape),
    ("GET", "/rerank", "POST", tgi_shape),
    ("GET", "/generate", "POST", tgi_shape),
    ("GET", "/generate_stream", "POST", tgi_shape),
    ("GET", "/v2/models/identity_fp32/infer", "POST", plain_shape),
    ("DELETE", "/v2/health/ready", "GET, HEAD", plain_shape),
    ("PUT", "/metrics", "GET, HEAD", plain_shape),
]


@pytest.mark.parametrize(
    ("method", "path", "allowed", "shape"), CASES, ids=[f"{m} {p}" for m, p, _, _ in CASES]
)
def test_wrong_method_answers_405_in_the_route_s_own_shape(
    server: ServerProcess, method: str, path: str, allowed: str, shape: Callable[[Any], str]
) -> None:
    with httpx.Client(base_url=server.http_url, timeout=TIMEOUT_S) as http:
        for _ in range(2):  # the second from the server's memory of routed URLs
            answer = http.request(method, path)
            assert answer.status_code == 405, answer.text
            assert answer.headers["allow"] == allowed
            message = shape(answer.json())
            assert message == f"Method Not Allowed: {method} {path} (allowed: {allowed})"
            head = http.head(path)  # no body, whatever the status (RFC 9110 §9.3.2)
            assert head.content == b""
        assert http.get("/v2/health/live").json() == {"live": True}


def test_the_openai_client_reads_the_405_as_an_openai_error(server: ServerProcess) -> None:
    client = openai.OpenAI(base_url=server.http_url + "/v1", api_key="unused", max_retries=0)
    with pytest.raises(openai.APIStatusError) as raised:
        client.get("/chat/completions", cast_to=object)
    assert raised.value.status_code == 405
    text = "Method Not Allowed: GET /v1/chat/completions (allowed: POST)"
    assert raised.value.message == f"Error code: 405 - {text}"  # read from error.message
