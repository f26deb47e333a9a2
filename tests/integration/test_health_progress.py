"""Health that tells the truth: a model version that finishes nothing for ``--stall-timeout``
while requests wait turns not ready (its ready, the server's ready on every protocol's probe,
the gRPC health service, its reason in the metadata and the status page), liveness stays up, and
once it moves again it is ready again — and the requests that waited are answered."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.integration.test_grpc_health import Status, check
from tests.serverproc import ServerProcess, served, start_server, wait_for

MODEL = """
import time
from pathlib import Path
from rosettaserve import Model


class Gate(Model):
    def predict(self, inputs):
        gate = Path(self.config["parameters"]["gate"])
        while not gate.exists():  # held until the test opens the gate
            time.sleep(0.02)
        return {"Y": inputs["X"]}
"""
PROBES = ["/v2/health/ready", "/grps/v1/health/ready", "/ping"]  # OIP, grps, TorchServe


@pytest.fixture
def gate(tmp_path: Path) -> Path:
    return tmp_path / "gate"


@pytest.fixture
def server(tmp_path: Path, gate: Path) -> Iterator[ServerProcess]:
    folder = tmp_path / "repo" / "gated"
    (folder / "1").mkdir(parents=True)
    (folder / "1" / "model.py").write_text(MODEL)
    (folder / "model.yaml").write_text(
        f"runtime: python\ninstances: 1\nparameters: {{gate: '{gate}'}}\n"
        "inputs: [{name: X, datatype: FP32, shape: [-1]}]\n"
        "outputs: [{name: Y, datatype: FP32, shape: [-1]}]\n"
    )
    yield from served(start_server(tmp_path / "repo", "--stall-timeout", "1"))


def infer(server: ServerProcess) -> int:
    body = {"inputs": [{"name": "X", "datatype": "FP32", "shape": [1], "data": [1.0]}]}
    url = f"{server.http_url}/v2/models/gated/infer"
    return httpx.post(url, json=body, timeout=120).status_code


def status(server: ServerProcess, path: str) -> int:
    return httpx.get(server.http_url + path, timeout=10).status_code


def reason(server: ServerProcess) -> Any:
    return httpx.get(f"{server.http_url}/v2/models/gated", timeout=10).json()["properties"]


def test_a_version_that_makes_no_progress_is_not_ready_until_it_moves(
    server: ServerProcess, gate: Path
) -> None:
    answers: list[int] = []
    clients = [threading.Thread(target=lambda: answers.append(infer(server))) for _ in range(2)]
    for client in clients:  # one runs (held), one waits for the one instance
        client.start()
    wait_for(lambda: status(server, "/v2/models/gated/ready") == 503, timeout=60)
    properties = reason(server)
    assert properties["state"] == "UNAVAILABLE"
    assert "no progress: no call ended for" in properties["reason"]
    assert "--stall-timeout 1" in properties["reason"]
    assert [status(server, p) for p in PROBES] == [503, 503, 500]  # (TorchServe's: 500)
    assert httpx.get(server.http_url + "/ping").json() == {"status": "Unhealthy"}
    assert check(server.grpc_address, "") == Status.NOT_SERVING
    assert status(server, "/v2/health/live") == 200  # a process check: the process is fine
    page = httpx.get(server.http_url + "/status.json", timeout=10).text  # the status page's
    assert "no progress" in page
    assert any("is not ready: no progress" in line for line in server.lines)
    gate.touch()
    for client in clients:
        client.join(120)
    assert answers == [200, 200]
    wait_for(lambda: status(server, "/v2/models/gated/ready") == 200, timeout=60)
    assert [status(server, p) for p in PROBES] == [200, 200, 200]
    assert check(server.grpc_address, "") == Status.SERVING
    assert any("is ready again" in line for line in server.lines)
