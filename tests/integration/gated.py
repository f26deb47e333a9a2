"""The gated model, with which a test decides what queues together: it runs while no "hold"
file exists in its repository and waits while one does, and it logs every batch it ran. Also the
OIP ModelInfer rpc as a plain callable (no generated service stub needed)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import httpx
import numpy as np

from rosettaserve.protocols.oip.pb import grpc_service_pb2 as pb
from tests.serverproc import ServerProcess, start_server, stop_cleanly

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


def serve_gated(repo: Path) -> Iterator[ServerProcess]:
    """A server on ``repo`` (for a fixture); it lets go of any hold before it stops."""
    proc = start_server(repo)
    yield proc
    (repo / "hold").unlink(missing_ok=True)
    stop_cleanly(proc)


def model_infer(channel: grpc.Channel) -> Any:
    """ModelInfer on ``channel``: call it with a ModelInferRequest (and a timeout)."""
    return channel.unary_unary(
        INFER,
        request_serializer=pb.ModelInferRequest.SerializeToString,
        response_deserializer=pb.ModelInferResponse.FromString,
    )


def rest_infer(server: ServerProcess, model: str, x: np.ndarray) -> np.ndarray:
    body = {"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": list(x.shape)}]}
    body["inputs"][0]["data"] = x.ravel().tolist()
    reply = httpx.post(f"{server.http_url}/v2/models/{model}/infer", json=body, timeout=60)
    assert reply.status_code == 200, reply.text
    out = reply.json()["outputs"][0]
    return np.array(out["data"], np.float32).reshape(out["shape"])


def in_threads(calls: list[Callable[[], Any]]) -> tuple[list[threading.Thread], list[Any]]:
    results: list[Any] = [None] * len(calls)

    def run(i: int) -> None:
        results[i] = calls[i]()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(calls))]
    for t in threads:
        t.start()
    return threads, results
