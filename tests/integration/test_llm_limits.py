"""Queue limits and disconnects on a real server: one running sequence, no waiting room.

A full engine answers 429 in each family's error shape instead of queueing; a client that goes
away (streaming or not) frees its slot. The long request asks for more tokens than could be
generated during the test, so only cancellation can free the slot in time.
"""

from __future__ import annotations

import shutil
import socket
import time
from collections.abc import Iterator
from typing import Any

import httpx
import orjson
import pytest

from tests.conftest import EXAMPLES
from tests.serverproc import ServerProcess, served, start_server

MODEL_YAML = """\
runtime: llm
parameters: {threads: 1, max_num_seqs: 1, max_waiting: 0, max_model_len: 400000}
"""
LONG_REQUEST = {
    "model": "tiny_llama",
    "prompt": "Once upon a time",
    "max_tokens": 300_000,
    "temperature": 0,
    "ignore_eos": True,
}
FREE_TIMEOUT_S = 30.0  # generating 300k tokens takes far longer than this


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    repo = tmp_path_factory.mktemp("llm_limits_repo")
    shutil.copytree(EXAMPLES / "tiny_llama", repo / "tiny_llama")
    (repo / "tiny_llama" / "model.yaml").write_text(MODEL_YAML)
    yield from served(start_server(repo))


def raw_request(server: ServerProcess, path: str, doc: dict[str, Any]) -> socket.socket:
    host, port = server.http_hostport.rsplit(":", 1)
    sock = socket.create_connection((host, int(port)), timeout=30)
    body = orjson.dumps(doc)
    head = f"POST {path} HTTP/1.1\r\nhost: x\r\ncontent-length: {len(body)}\r\n\r\n".encode()
    sock.sendall(head + body)
    return sock


def occupy_streaming(server: ServerProcess) -> socket.socket:
    """A long streaming request, read until its first token arrived (it holds the slot)."""
    sock = raw_request(server, "/v1/completions", {**LONG_REQUEST, "stream": True})
    seen = b""
    while b'"text"' not in seen:
        chunk = sock.recv(65536)
        assert chunk, seen
        seen += chunk
    assert seen.startswith(b"HTTP/1.1 200")
    return sock


def small_request(client: httpx.Client) -> httpx.Response:
    body = {"inputs": "hi", "parameters": {"max_new_tokens": 2}}
    return client.post("/generate", content=orjson.dumps(body))


def wait_for_free_slot(client: httpx.Client) -> float:
    start = time.monotonic()
    while time.monotonic() - start < FREE_TIMEOUT_S:
        reply = small_request(client)
        if reply.status_code == 200:
            return time.monotonic() - start
        assert reply.status_code == 429, reply.text
        time.sleep(0.02)
    raise AssertionError("the slot was not freed: the abandoned request is still generating")


FAMILIES: list[tuple[str, dict[str, Any], Any]] = [
    (
        "/v1/completions",
        {"model": "tiny_llama", "prompt": "hi", "max_tokens": 2},
        lambda d: d["error"]["type"] == "rate_limit_error",
    ),
    (
        "/v1/chat/completions",
        {"model": "tiny_llama", "messages": [{"role": "user", "content": "hi"}], "stream": True},
        lambda d: d["error"]["type"] == "rate_limit_error",
    ),
    (
        "/generate",
        {"inputs": "hi"},
        lambda d: d == {"error": d["error"], "error_type": "overloaded"},
    ),
    ("/generate_stream", {"inputs": "hi"}, lambda d: d["error_type"] == "overloaded"),
    ("/generate", {"prompt": "hi"}, lambda d: d["error_type"] == "Too Many Requests"),
    ("/v2/models/tiny_llama/generate", {"text_input": "hi"}, lambda d: set(d) == {"error"}),
    ("/infer", {"inputs": "hi", "stream": True}, lambda d: d["error_type"] == "Too Many Requests"),
    (
        "/v2/models/tiny_llama/infer",
        {"inputs": [{"name": "text_input", "datatype": "BYTES", "shape": [1], "data": ["hi"]}]},
        lambda d: set(d) == {"error"},
    ),
]


def test_a_full_engine_answers_429_in_each_family_then_frees_on_disconnect(
    server: ServerProcess,
) -> None:
    with httpx.Client(base_url=server.http_url, timeout=60) as client:
        assert small_request(client).status_code == 200
        holder = occupy_streaming(server)
        for path, body, shape in FAMILIES:
            reply = client.post(path, content=orjson.dumps(body))
            assert reply.status_code == 429, (path, reply.text)
            assert shape(reply.json()), (path, reply.json())
        holder.close()  # the client goes away mid-stream
        wait_for_free_slot(client)


def test_a_non_streaming_client_that_leaves_frees_its_slot(server: ServerProcess) -> None:
    with httpx.Client(base_url=server.http_url, timeout=60) as client:
        holder = raw_request(server, "/v1/completions", LONG_REQUEST)
        deadline = time.monotonic() + FREE_TIMEOUT_S
        while small_request(client).status_code != 429:  # until the long one holds the slot
            assert time.monotonic() < deadline
        holder.close()
        wait_for_free_slot(client)
