"""--workers 2: two processes serve the same ports, each loads its models once, one pair of
address lines, readiness, summed metrics, SIGTERM drains both, and a dead worker is replaced."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from rosettaserve.protocols.oip.pb import grpc_service_pb2 as pb
from tests.integration.gated import wait_for
from tests.integration.logs_support import wait_for_lines
from tests.integration.oip_grpc_support import model_infer
from tests.serverproc import ServerProcess, start_server

PID_MODEL = '''
import os
import time
from pathlib import Path

import numpy as np

from rosettaserve import Model


class Pid(Model):
    """Answers the pid of the process that ran it; sleeps for parameter "sleep" seconds."""

    def load(self):
        with Path(self.config["parameters"]["loads"]).open("a") as f:
            f.write(f"{os.getpid()}\\n")

    def predict(self, inputs, parameters):
        time.sleep(float(parameters.get("sleep", 0)))
        return {"PID": np.array([os.getpid()], np.int64)}
'''
BODY = {"inputs": [{"name": "X", "datatype": "FP32", "shape": [1], "data": [1.0]}]}


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    folder = tmp_path / "repo" / "pid"
    folder.mkdir(parents=True)
    (folder / "model.py").write_text(PID_MODEL)
    (folder / "model.yaml").write_text(
        "runtime: python\nclass: Pid\n"
        "inputs: [{name: X, datatype: FP32, shape: [-1]}]\n"
        "outputs: [{name: PID, datatype: INT64, shape: [1]}]\n"
        f"parameters: {{loads: '{tmp_path / 'loads.txt'}'}}\n"
    )
    return tmp_path / "repo"


@pytest.fixture
def workers(repo: Path) -> Iterator[ServerProcess]:
    server = start_server(repo, "--workers", "2", "--allow-client-shm")
    yield server
    server.stop()


def pid_over_rest(url: str, **parameters: float) -> int:
    # a new connection each time: the kernel spreads connections over the workers
    # (a generous timeout: the slow requests one worker takes run one after another)
    body = {**BODY, "parameters": parameters}
    reply = httpx.post(f"{url}/v2/models/pid/infer", json=body, timeout=60)
    assert reply.status_code == 200, reply.text
    return int(reply.json()["outputs"][0]["data"][0])


def pid_over_grpc(address: str) -> int:
    msg = pb.ModelInferRequest(model_name="pid")
    msg.inputs.add(name="X", datatype="FP32", shape=[1]).contents.fp32_contents.append(1.0)
    reply = model_infer(address, msg)
    return int.from_bytes(reply.raw_output_contents[0], "little")


def loads(repo: Path) -> list[int]:
    return [int(line) for line in (repo.parent / "loads.txt").read_text().split()]


def test_two_workers_share_the_ports_and_each_loads_its_models_once(
    workers: ServerProcess, repo: Path
) -> None:
    assert [ln for ln in workers.lines if ln.startswith(("http: ", "grpc: "))] == [
        f"http: {workers.http_url}",
        f"grpc: {workers.grpc_address}",
    ]
    assert len([ln for ln in workers.lines if ln.startswith("  model pid ")]) == 1
    loaded = loads(repo)
    assert len(loaded) == 2
    assert len(set(loaded)) == 2
    assert workers.proc.pid not in loaded  # the supervisor serves nothing itself
    served = {pid_over_rest(workers.http_url) for _ in range(40)}
    assert served == set(loaded)  # both answer (40 connections all to one: 2^-39)
    grpc_served = {pid_over_grpc(workers.grpc_address) for _ in range(40)}
    assert grpc_served == set(loaded)
    assert httpx.get(workers.http_url + "/v2/health/ready").status_code == 200
    metrics = httpx.get(workers.http_url + "/metrics").text
    assert "rosettaserve_worker_processes 2\n" in metrics
    ok = 'requests_total{model="pid",version="1",protocol="oip_rest",outcome="success"} 40\n'
    assert f"rosettaserve_{ok}" in metrics  # summed over both workers
    assert 'rosettaserve_model_state{model="pid",version="1",state="READY"} 2\n' in metrics
    assert loads(repo) == loaded  # nothing loaded twice
    # a shared-memory region registered with one worker would be unknown to the other
    register = f"{workers.http_url}/v2/systemsharedmemory/region/r/register"
    reply = httpx.post(register, json={"key": "/k", "byte_size": 8})
    assert reply.status_code == 501
    assert "--workers 1" in reply.json()["error"]
    assert "system_shared_memory" not in httpx.get(workers.http_url + "/v2").json()["extensions"]


def test_sigterm_drains_every_worker_then_exits_zero(workers: ServerProcess, repo: Path) -> None:
    results: list[int] = []
    slow = [
        threading.Thread(target=lambda: results.append(pid_over_rest(workers.http_url, sleep=1)))
        for _ in range(6)
    ]
    for t in slow:
        t.start()
    wait_for(lambda: _inflight(workers) == 6, "six requests in flight")
    assert workers.stop() == 0
    for t in slow:
        t.join(30)
    assert len(results) == 6  # every one answered 200 (pid_over_rest checks)
    assert set(results) <= set(loads(repo))
    wait_for_lines(workers, lambda line: line == "rosettaserve stopped")  # its output's last


def test_a_worker_that_dies_is_replaced(workers: ServerProcess, repo: Path) -> None:
    first = loads(repo)
    os.kill(first[1], signal.SIGKILL)
    wait_for(lambda: len(loads(repo)) == 3, "a new worker loaded its models")
    replacement = loads(repo)[2]
    wait_for(
        lambda: replacement in {pid_over_rest(workers.http_url) for _ in range(20)},
        "the new worker serves",
    )
    assert {pid_over_rest(workers.http_url) for _ in range(40)} == {first[0], replacement}


def test_model_control_needs_one_worker(repo: Path) -> None:
    cmd = [sys.executable, "-m", "rosettaserve", "serve", str(repo), "--workers", "2"]
    done = subprocess.run(
        [*cmd, "--enable-model-control", "--http-port", "0", "--grpc-port", "0"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert "--enable-model-control needs --workers 1" in done.stderr


def _inflight(server: ServerProcess) -> float:
    text = httpx.get(server.http_url + "/metrics").text
    line = next(ln for ln in text.splitlines() if ln.startswith("rosettaserve_inflight_requests"))
    return float(line.rsplit(" ", 1)[1])
