"""grps health on a real server: one online flag for REST and gRPC, live always 200, offline
fails ready while predict keeps working, and the server goes online by itself once loaded."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest

from rosettaserve.protocols.grps.pb import grps_pb2 as pb
from tests.integration.grps_support import TIMEOUT_S
from tests.serverproc import START_TIMEOUT_S, ServerProcess, start_server, wait_for

GATE_MODEL = '''
import time
from pathlib import Path

import numpy as np

from rosettaserve import Model


class Gated(Model):
    """load() waits until the file named by parameters.gate exists."""

    def load(self) -> None:
        while not Path(self.config["parameters"]["gate"]).exists():
            time.sleep(0.02)

    def predict(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return {"OUT": inputs["IN"]}
'''
GATE_YAML = """runtime: python
class: Gated
inputs: [{name: IN, datatype: BYTES, shape: [1]}]
outputs: [{name: OUT, datatype: BYTES, shape: [1]}]
parameters: {gate: GATE}
"""


@pytest.fixture
def stub(grps_server: ServerProcess, grps_stubs: Any) -> Iterator[Any]:
    """A channel of its own per test."""
    with grpc.insecure_channel(grps_server.grpc_address) as channel:
        yield grps_stubs.GrpsServiceStub(channel)


def rest(server: ServerProcess, what: str, method: str = "GET") -> tuple[int, dict[str, Any]]:
    url = f"{server.http_url}/grps/v1/health/{what}"
    response = httpx.request(method, url, timeout=TIMEOUT_S)
    return response.status_code, response.json()["status"]


def grpc_status(stub: Any, rpc: str) -> tuple[int, int]:
    status = getattr(stub, rpc)(pb.GrpsMessage(), timeout=TIMEOUT_S).status
    return status.code, status.status


OK = (200, {"code": 200, "msg": "OK", "status": "SUCCESS"})
GRPC_OK = (200, pb.Status.SUCCESS)
GRPC_DOWN = (503, pb.Status.FAILURE)


def assert_rest_down(server: ServerProcess) -> None:
    code, status = rest(server, "ready")
    assert (code, status["code"], status["status"]) == (503, 503, "FAILURE")
    assert "Service Unavailable" in status["msg"]


def test_online_by_itself_once_loaded(grps_server: ServerProcess, stub: Any) -> None:
    assert rest(grps_server, "ready") == OK
    assert grpc_status(stub, "CheckReadiness") == GRPC_OK


def test_one_flag_for_both_transports(grps_server: ServerProcess, stub: Any) -> None:
    try:
        assert rest(grps_server, "offline") == OK
        assert_rest_down(grps_server)
        assert grpc_status(stub, "CheckReadiness") == GRPC_DOWN
        assert rest(grps_server, "live") == OK
        assert grpc_status(stub, "CheckLiveness") == GRPC_OK
        assert grpc_status(stub, "Online") == GRPC_OK
        assert rest(grps_server, "ready", "POST") == OK
        assert grpc_status(stub, "Offline") == GRPC_OK
        assert_rest_down(grps_server)
        assert grpc_status(stub, "CheckReadiness") == GRPC_DOWN
    finally:
        rest(grps_server, "online")
    assert rest(grps_server, "ready") == OK


def test_predict_keeps_working_while_offline(grps_server: ServerProcess, stub: Any) -> None:
    try:
        assert grpc_status(stub, "Offline") == GRPC_OK
        assert stub.Predict(pb.GrpsMessage(str_data="a")).str_data == "hello, a!"
        url = f"{grps_server.http_url}/grps/v1/infer/predict"
        response = httpx.post(url, json={"str_data": "b"}, timeout=TIMEOUT_S)
        assert (response.status_code, response.json()["str_data"]) == (200, "hello, b!")
        oip = httpx.get(f"{grps_server.http_url}/v2/health/ready", timeout=TIMEOUT_S)
        assert oip.status_code == 200  # grps offline is grps's flag only
    finally:
        rest(grps_server, "online")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_not_ready_while_models_load_then_online_by_itself(tmp_path: Path, grps_stubs: Any) -> None:
    """The server listens while it loads (and prints its ports only after): pick the ports."""
    gate = tmp_path / "repo" / "gated"
    gate.mkdir(parents=True)
    (gate / "model.py").write_text(GATE_MODEL)
    (gate / "model.yaml").write_text(GATE_YAML.replace("GATE", str(gate / "open")))
    http_port, grpc_port = free_port(), free_port()
    args = ("--http-port", str(http_port), "--grpc-port", str(grpc_port))
    started: list[ServerProcess] = []
    starter = threading.Thread(
        target=lambda: started.append(start_server(tmp_path / "repo", *args, wait_ready=False))
    )
    starter.start()
    loading = ServerProcess(None, f"http://127.0.0.1:{http_port}")  # type: ignore[arg-type]
    try:
        wait_for(lambda: answers(loading), START_TIMEOUT_S)
        assert rest(loading, "live") == OK
        assert_rest_down(loading)
        with grpc.insecure_channel(f"127.0.0.1:{grpc_port}") as channel:
            stub = grps_stubs.GrpsServiceStub(channel)
            assert grpc_status(stub, "CheckReadiness") == GRPC_DOWN
            (gate / "open").touch()
            wait_for(lambda: rest(loading, "ready")[0] == 200, START_TIMEOUT_S)
            assert grpc_status(stub, "CheckReadiness") == GRPC_OK
    finally:
        (gate / "open").touch()
        starter.join(START_TIMEOUT_S)
        for server in started:
            assert server.stop() == 0, "\n".join(server.lines)
    assert len(started) == 1


def answers(server: ServerProcess) -> bool:
    try:
        rest(server, "live")
    except httpx.TransportError:
        return False
    return True
