"""Dynamic batching in a real server: requests from REST and gRPC meet in one batch and each gets
its own rows back; inputs of different shapes run in separate batches.

The model waits while a "hold" file exists, so the test decides which requests queue together:
it holds the model on a first request, sends the others, waits until /metrics shows them
queued, then lets go.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import httpx
import numpy as np
import pytest

from rosettaserve.protocols.oip.pb import grpc_service_pb2 as pb
from tests.integration.gated import (
    Gate,
    gated_model,
    in_threads,
    model_infer,
    rest_infer,
    serve_gated,
    wait_for,
)
from tests.serverproc import ServerProcess


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    repo = tmp_path_factory.mktemp("batching")
    gated_model(repo, "gated", "max_batch_size: 32\ndynamic_batching: {}\n")
    return repo


@pytest.fixture(scope="module")
def server(repo: Path) -> Iterator[ServerProcess]:
    yield from serve_gated(repo)


def grpc_infer(server: ServerProcess, model: str, x: np.ndarray) -> np.ndarray:
    msg = pb.ModelInferRequest(model_name=model, raw_input_contents=[x.tobytes()])
    msg.inputs.add(name="INPUT0", datatype="FP32", shape=list(x.shape))
    with grpc.insecure_channel(server.grpc_address) as channel:
        reply = model_infer(channel)(msg, timeout=60)
    shape = list(reply.outputs[0].shape)
    return np.frombuffer(reply.raw_output_contents[0], np.float32).reshape(shape)


def held_then(gate: Gate, calls: list[Callable[[], Any]]) -> list[Any]:
    """Hold the model on a first request, queue ``calls`` behind it, let go; their results."""
    before = len(gate.executions())
    gate.hold.touch()
    first, _ = in_threads([lambda: rest_infer(gate.server, gate.model, np.zeros((1, 2), "f4"))])
    wait_for(lambda: len(gate.executions()) == before + 1, "the first request runs")
    threads, results = in_threads(calls)
    wait_for(lambda: gate.queued() == len(calls), f"{len(calls)} requests queued")
    gate.hold.unlink()
    for t in [*first, *threads]:
        t.join(60)
    return results


def test_rest_and_grpc_requests_share_a_batch_and_get_their_own_rows(
    server: ServerProcess, repo: Path
) -> None:
    gate = Gate(server, repo, "gated")
    rng = np.random.default_rng(7)
    inputs = [rng.random((1 + i % 2, 2)).astype(np.float32) for i in range(8)]
    calls: list[Callable[[], Any]] = [
        (lambda x=x: rest_infer(server, "gated", x))
        if i % 2
        else (lambda x=x: grpc_infer(server, "gated", x))
        for i, x in enumerate(inputs)
    ]
    before = len(gate.executions())
    results = held_then(gate, calls)
    for x, y in zip(inputs, results, strict=True):
        np.testing.assert_allclose(y, 2 * x + 1, rtol=1e-6)
    rows = sum(len(x) for x in inputs)
    assert gate.executions()[before:] == ["1x2", f"{rows}x2"]
    stats = httpx.get(server.http_url + "/v2/models/gated/stats").json()["model_stats"][0]
    assert rows in [b["batch_size"] for b in stats["batch_stats"]]
    assert stats["inference_stats"]["queue"]["count"] >= len(inputs)
    metrics = httpx.get(server.http_url + "/metrics").text
    for protocol in ("oip_rest", "oip_grpc"):
        assert f'model="gated",version="1",protocol="{protocol}",outcome="success"' in metrics


def test_inputs_of_different_shapes_run_in_separate_batches(
    server: ServerProcess, repo: Path
) -> None:
    gate = Gate(server, repo, "gated")
    inputs = [np.full((1, 2 + i % 2), i, np.float32) for i in range(6)]
    calls: list[Callable[[], Any]] = [(lambda x=x: rest_infer(server, "gated", x)) for x in inputs]
    before = len(gate.executions())
    results = held_then(gate, calls)
    for x, y in zip(inputs, results, strict=True):
        np.testing.assert_array_equal(y, 2 * x + 1)
    assert sorted(gate.executions()[before + 1 :]) == ["3x2", "3x3"]


def test_model_config_announces_dynamic_batching(server: ServerProcess) -> None:
    config = httpx.get(server.http_url + "/v2/models/gated/config").json()
    assert config["max_batch_size"] == 32
    assert config["dynamic_batching"]["max_queue_delay_microseconds"] == 0
    assert config["dynamic_batching"]["preferred_batch_size"] == []


def raw_request(model: str, value: float, close: bool = False) -> bytes:
    body = json.dumps(
        {"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1, 2], "data": [value] * 2}]}
    ).encode()
    head = f"POST /v2/models/{model}/infer HTTP/1.1\r\nHost: t\r\n"
    head += f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
    head += "Connection: close\r\n\r\n" if close else "\r\n"
    return head.encode() + body


def read_answers(sock: socket.socket, count: int) -> list[list[float]]:
    """The first row of OUTPUT0 of ``count`` answers read from ``sock``, in order."""
    data, answers = b"", []
    while len(answers) < count:
        head_end = data.find(b"\r\n\r\n")
        if head_end >= 0:
            head = data[:head_end].decode()
            assert head.startswith("HTTP/1.1 200"), head
            length = int(head.lower().split("content-length:")[1].split("\r\n")[0])
            end = head_end + 4 + length
            if len(data) >= end:
                answers.append(json.loads(data[head_end + 4 : end])["outputs"][0]["data"])
                data = data[end:]
                continue
        chunk = sock.recv(65536)
        assert chunk, f"closed after {len(answers)} answers"
        data += chunk
    return answers


def connect(server: ServerProcess) -> socket.socket:
    host, port = server.http_hostport.rsplit(":", 1)
    return socket.create_connection((host, int(port)), timeout=60)


def hold_first(gate: Gate) -> list[Any]:
    """A first request (from a thread) that the model holds: what it returns, once let go."""
    before = len(gate.executions())
    gate.hold.touch()
    first, _ = in_threads([lambda: rest_infer(gate.server, gate.model, np.zeros((1, 2), "f4"))])
    wait_for(lambda: len(gate.executions()) == before + 1, "the first request runs")
    return first


def test_requests_pipelined_behind_a_batched_one_are_answered_in_order(
    server: ServerProcess, repo: Path
) -> None:
    """The first request of a connection waits for its batch outside a task and is answered
    from the batch's result; those the client pipelined behind it are answered after it, in
    order, and the connection serves on."""
    gate = Gate(server, repo, "gated")
    first = hold_first(gate)
    with connect(server) as sock:
        sock.sendall(b"".join(raw_request("gated", v) for v in (1.0, 2.0, 3.0)))
        wait_for(lambda: gate.queued() == 1, "the connection's first request queued")
        gate.hold.unlink()
        assert read_answers(sock, 3) == [[3.0, 3.0], [5.0, 5.0], [7.0, 7.0]]
        sock.sendall(raw_request("gated", 4.0) + raw_request("gated", 5.0, close=True))
        assert read_answers(sock, 2) == [[9.0, 9.0], [11.0, 11.0]]
        assert sock.recv(1) == b""  # closed after the answer that said so
    for t in first:
        t.join(60)


def test_a_client_that_leaves_while_its_request_is_queued_drops_it(
    server: ServerProcess, repo: Path
) -> None:
    gate = Gate(server, repo, "gated")
    first = hold_first(gate)
    with connect(server) as sock:
        sock.sendall(raw_request("gated", 42.0))
        wait_for(lambda: gate.queued() == 1, "the request queued")
    wait_for(lambda: gate.queued() == 0, "the request withdrawn once its client left")
    gate.hold.unlink()
    for t in first:
        t.join(60)
    np.testing.assert_array_equal(rest_infer(server, "gated", np.ones((1, 2), "f4")), [[3, 3]])
    assert 42.0 not in gate.values()
