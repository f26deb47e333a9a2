"""Dynamic batching in a real server: requests from REST and gRPC meet in one batch and each gets
its own rows back; inputs of different shapes run in separate batches.

The model waits while a "hold" file exists, so the test decides which requests queue together:
it holds the model on a first request, sends the others, waits until /metrics shows them
queued, then lets go.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import httpx
import numpy as np
import pytest

from rosettaserve.protocols.oip.pb import grpc_service_pb2 as pb
from tests.serverproc import ServerProcess, start_server

GATED = '''
import time
from pathlib import Path

from rosettaserve import Model


class Gated(Model):
    """OUTPUT0 = 2 * INPUT0 + 1, one row per input row. Logs each execution's rows, then waits
    while the hold file exists."""

    def load(self):
        params = self.config["parameters"]
        self.hold, self.log = Path(params["hold"]), Path(params["log"])

    def predict(self, inputs):
        x = inputs["INPUT0"]
        with self.log.open("a") as f:
            values = ",".join(f"{v:g}" for v in x[:, 0])
            f.write(f"{x.shape[0]}x{x.shape[1]}:{values}\\n")
        while self.hold.exists():
            time.sleep(0.005)
        return {"OUTPUT0": 2 * x + 1}
'''
INFER = "/inference.GRPCInferenceService/ModelInfer"


def gated_model(repo: Path, name: str, extra_yaml: str) -> None:
    folder = repo / name
    folder.mkdir(parents=True)
    (folder / "model.py").write_text(GATED)
    (folder / "model.yaml").write_text(
        "runtime: python\nclass: Gated\n"
        "inputs: [{name: INPUT0, datatype: FP32, shape: [-1, -1]}]\n"
        "outputs: [{name: OUTPUT0, datatype: FP32, shape: [-1, -1]}]\n"
        f"parameters: {{hold: '{repo / 'hold'}', log: '{repo / (name + '.log')}'}}\n" + extra_yaml
    )


class Gate:
    """Holds a gated model while open; tells what it executed."""

    def __init__(self, server: ServerProcess, repo: Path, model: str) -> None:
        self.server, self.repo, self.model = server, repo, model
        self.log = repo / f"{model}.log"
        self.hold = repo / "hold"

    def lines(self) -> list[str]:
        return self.log.read_text().split() if self.log.exists() else []

    def executions(self) -> list[str]:
        """The shape of every batch the model ran, in order."""
        return [line.split(":")[0] for line in self.lines()]

    def values(self) -> set[float]:
        """The first column of every row the model saw."""
        return {float(v) for line in self.lines() for v in line.split(":")[1].split(",")}

    def queued(self) -> int:
        text = httpx.get(self.server.http_url + "/metrics").text
        prefix = f'rosettaserve_queued_requests{{model="{self.model}",version="1"}} '
        line = next((ln for ln in text.splitlines() if ln.startswith(prefix)), prefix + "0")
        return int(line.rsplit(" ", 1)[1])


def wait_for(check: Callable[[], bool], what: str) -> None:
    for _ in range(2000):
        if check():
            return
        threading.Event().wait(0.01)
    raise AssertionError(f"never reached: {what}")


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    repo = tmp_path_factory.mktemp("batching")
    gated_model(repo, "gated", "max_batch_size: 32\ndynamic_batching: {}\n")
    return repo


@pytest.fixture(scope="module")
def server(repo: Path) -> Iterator[ServerProcess]:
    proc = start_server(repo)
    yield proc
    (repo / "hold").unlink(missing_ok=True)
    assert proc.stop() == 0, "\n".join(proc.lines)


def rest_infer(server: ServerProcess, model: str, x: np.ndarray) -> np.ndarray:
    body = {"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": list(x.shape)}]}
    body["inputs"][0]["data"] = x.ravel().tolist()
    reply = httpx.post(f"{server.http_url}/v2/models/{model}/infer", json=body, timeout=60)
    assert reply.status_code == 200, reply.text
    out = reply.json()["outputs"][0]
    return np.array(out["data"], np.float32).reshape(out["shape"])


def grpc_infer(server: ServerProcess, model: str, x: np.ndarray) -> np.ndarray:
    msg = pb.ModelInferRequest(model_name=model, raw_input_contents=[x.tobytes()])
    msg.inputs.add(name="INPUT0", datatype="FP32", shape=list(x.shape))
    with grpc.insecure_channel(server.grpc_address) as channel:
        call = channel.unary_unary(
            INFER,
            request_serializer=pb.ModelInferRequest.SerializeToString,
            response_deserializer=pb.ModelInferResponse.FromString,
        )
        reply = call(msg, timeout=60)
    shape = list(reply.outputs[0].shape)
    return np.frombuffer(reply.raw_output_contents[0], np.float32).reshape(shape)


def in_threads(calls: list[Callable[[], Any]]) -> tuple[list[threading.Thread], list[Any]]:
    results: list[Any] = [None] * len(calls)

    def run(i: int) -> None:
        results[i] = calls[i]()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(calls))]
    for t in threads:
        t.start()
    return threads, results


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
