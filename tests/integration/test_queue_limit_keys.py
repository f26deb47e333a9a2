"""The queue limit shared between API keys in a real server: one key fills a model's queue (its
max_queue_size), and another key's request is still admitted and answered while the first key
gets 429 (RESOURCE_EXHAUSTED over gRPC); the same on an LLM (the generation plane's limit), and
on an LLM without max_queue_size (the engine's own capacity, max_num_seqs + max_waiting).

What waits is decided by the test (the gated model held, long generations running), and every
step waits for /metrics to show it: states and answers, never times."""

from __future__ import annotations

import shutil
import socket
from collections.abc import Iterator
from typing import Any

import grpc
import httpx
import orjson
import pytest

from rosettaserve.protocols.oip.pb import grpc_service_pb2 as pb
from tests.conftest import EXAMPLES
from tests.integration.gated import Gate, gated_model, in_threads, model_infer
from tests.serverproc import ServerProcess, start_server, stop_cleanly, wait_for

KEY_A, KEY_B = "flooding-key-a1", "quiet-key-b2"
LLM_YAML = """\
runtime: llm
max_queue_size: 2
parameters: {threads: 1, max_num_seqs: 1, max_model_len: 400000}
"""
ENGINE_YAML = """\
runtime: llm
parameters: {threads: 1, max_num_seqs: 1, max_waiting: 2, max_model_len: 400000}
"""
LONG = {"prompt": "Once upon a time", "max_tokens": 300_000, "temperature": 0, "ignore_eos": True}
WAIT_S = 60.0  # upper bound of every wait below (300k tokens take far longer)


@pytest.fixture(scope="module")
def gate(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gate]:
    repo = tmp_path_factory.mktemp("queue_keys")
    gated_model(repo, "gated", "max_batch_size: 1\ndynamic_batching: {}\nmax_queue_size: 2\n")
    shutil.copytree(EXAMPLES / "tiny_llama", repo / "llm")
    (repo / "llm" / "model.yaml").write_text(LLM_YAML)
    shutil.copytree(EXAMPLES / "tiny_llama", repo / "engine")
    (repo / "engine" / "model.yaml").write_text(ENGINE_YAML)
    keys = repo / "keys.txt"
    keys.write_text(f"{KEY_A}\n{KEY_B}\n")
    server = start_server(repo, "--api-key-file", str(keys))
    yield Gate(server, repo, "gated")
    (repo / "hold").unlink(missing_ok=True)
    stop_cleanly(server)


def gauge(server: ServerProcess, name: str, model: str) -> int:
    text = httpx.get(server.http_url + "/metrics", headers={"x-api-key": KEY_A}).text
    prefix = f'rosettaserve_{name}{{model="{model}",version="1"}} '
    line = next((ln for ln in text.splitlines() if ln.startswith(prefix)), prefix + "0")
    return int(float(line.rsplit(" ", 1)[1]))


def rest(server: ServerProcess, value: float, key: str) -> httpx.Response:
    tensor = {"name": "INPUT0", "datatype": "FP32", "shape": [1, 1], "data": [value]}
    url = f"{server.http_url}/v2/models/gated/infer"
    return httpx.post(url, json={"inputs": [tensor]}, headers={"x-api-key": key}, timeout=60)


def grpc_code(server: ServerProcess, value: float, key: str) -> grpc.StatusCode:
    msg = pb.ModelInferRequest(model_name="gated")
    msg.inputs.add(name="INPUT0", datatype="FP32", shape=[1, 1]).contents.fp32_contents.append(
        value
    )
    with grpc.insecure_channel(server.grpc_address) as channel:
        try:
            model_infer(channel)(msg, metadata=[("x-api-key", key)], timeout=60)
        except grpc.RpcError as exc:
            return exc.code()  # type: ignore[no-any-return]
    return grpc.StatusCode.OK


def test_a_flooding_key_fills_the_queue_and_the_quiet_key_is_still_answered(gate: Gate) -> None:
    server = gate.server
    gate.hold.touch()
    threads, first = in_threads([lambda: rest(server, -1.0, KEY_A)])
    replies = [first]  # (each thread writes into its own list)
    wait_for(lambda: len(gate.lines()) == 1, WAIT_S)  # a's first request runs, held
    for n, value in enumerate((1.0, 2.0), 1):
        started, got = in_threads([lambda value=value: rest(server, value, KEY_A)])
        threads, replies = threads + started, [*replies, got]
        wait_for(lambda n=n: gauge(server, "queued_requests", "gated") == n, WAIT_S)
    alone = rest(server, 3.0, KEY_A)  # the queue is full, of a's requests only: the limit
    assert alone.status_code == 429
    assert "2 requests are queued, its limit;" in alone.json()["error"]
    quiet, answer = in_threads([lambda: rest(server, 101.0, KEY_B)])  # under b's share
    wait_for(lambda: answer[0] or gauge(server, "queued_requests", "gated") == 3, WAIT_S)
    assert answer[0] is None, answer[0].text  # queued, not refused
    flood = rest(server, 4.0, KEY_A)  # over the limit, and over a's share
    assert flood.status_code == 429
    assert flood.headers["retry-after"] == "1"
    assert "this API key's, its share" in flood.json()["error"]
    assert grpc_code(server, 5.0, KEY_A) is grpc.StatusCode.RESOURCE_EXHAUSTED
    gate.hold.unlink()
    for thread in threads + quiet:
        thread.join(60)
    assert answer[0].status_code == 200, answer[0].text
    assert answer[0].json()["outputs"][0]["data"] == [203.0]
    assert [r.status_code for (r,) in replies] == [200, 200, 200]
    assert not {3.0, 4.0, 5.0} & gate.values()  # the refused ones never reached the model


def open_stream(server: ServerProcess, key: str, model: str = "llm") -> socket.socket:
    """A long streaming completion of ``key``'s, left open (closing it cancels it)."""
    host, port = server.http_hostport.rsplit(":", 1)
    sock = socket.create_connection((host, int(port)), timeout=WAIT_S)
    body = orjson.dumps({**LONG, "model": model, "stream": True})
    head = (
        f"POST /v1/completions HTTP/1.1\r\nhost: x\r\nx-api-key: {key}\r\n"
        f"content-length: {len(body)}\r\n\r\n"
    )
    sock.sendall(head.encode() + body)
    return sock


def complete(server: ServerProcess, key: str, model: str = "llm") -> httpx.Response:
    doc: dict[str, Any] = {"model": model, "prompt": "hi", "max_tokens": 2}
    url = f"{server.http_url}/v1/completions"
    return httpx.post(url, json=doc, headers={"x-api-key": key}, timeout=WAIT_S)


def flooded_then_fair(server: ServerProcess, model: str) -> tuple[httpx.Response, httpx.Response]:
    """One sequence runs at a time: a's long one runs and two more of a's wait; a's next is
    refused, b's is admitted past the limit (waiting, not refused), a's next after that is
    refused again, and b's runs first when a's running one ends (fair order); once a's are
    gone, a is answered again. Returns a's two refusals (alone, then beside b's)."""
    streams: list[socket.socket] = []
    try:
        for n in (1, 2, 3):
            streams.append(open_stream(server, KEY_A, model))
            wait_for(lambda n=n: gauge(server, "inflight_requests", model) == n, WAIT_S)
        alone = complete(server, KEY_A, model)
        assert alone.status_code == 429, alone.text
        quiet, answer = in_threads([lambda: complete(server, KEY_B, model)])
        wait_for(lambda: answer[0] or gauge(server, "inflight_requests", model) == 4, WAIT_S)
        assert answer[0] is None, answer[0].text  # waiting, not refused
        flood = complete(server, KEY_A, model)
        assert flood.status_code == 429, flood.text
        streams.pop(0).close()  # a's running generation ends: b's runs next
        quiet[0].join(WAIT_S)
        assert answer[0].status_code == 200, answer[0].text
        assert answer[0].json()["usage"]["completion_tokens"] == 2
    finally:
        for sock in streams:
            sock.close()
    wait_for(lambda: gauge(server, "inflight_requests", model) == 0, WAIT_S)
    assert complete(server, KEY_A, model).status_code == 200  # and a is answered again
    return alone, flood


def test_the_same_on_an_llm(gate: Gate) -> None:
    """The generation plane's limit (max_queue_size 2)."""
    alone, flood = flooded_then_fair(gate.server, "llm")
    assert "2 requests are queued, its limit;" in alone.text
    assert flood.json()["error"]["type"] == "rate_limit_error"


def test_the_llm_engines_own_capacity_is_shared_too(gate: Gate) -> None:
    """No max_queue_size: the engine's capacity (1 running + 2 waiting sequences) refuses; b's
    is admitted past it (its share: 3 / 2, rounded up)."""
    alone, flood = flooded_then_fair(gate.server, "engine")
    assert "(3 sequences running or queued, limit 3); retry later" in alone.text
    assert "and 3 of those are this API key's, its share" in flood.text
