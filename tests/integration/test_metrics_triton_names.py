"""/metrics under Triton's names on a real server, after requests over every tensor protocol (OIP
REST by tritonclient.http, OIP gRPC and grps gRPC by grpcio, TF Serving and grps REST by httpx):
each is counted, failures by Triton's reason, and the counters agree with /v2/models/.../stats."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import grpc
import httpx
import numpy as np
import pytest
import tritonclient.http as triton_http
from prometheus_client.parser import text_string_to_metric_families

from rosettaserve.observability.triton_names import TRITON_HELP
from rosettaserve.protocols.grps.pb import grps_pb2
from tests.conftest import EXAMPLES
from tests.integration.grps_support import generate_stubs
from tests.integration.oip_grpc_support import infer_half_plus_two
from tests.serverproc import ServerProcess, start_server, stop_cleanly

TIMEOUT_S = 30.0
Key = tuple[str, tuple[tuple[str, str], ...]]
HALF = {"model": "half_plus_two", "version": "123"}
FAULTY = {"model": "grps_faulty", "version": "1"}


def scrape(server: ServerProcess) -> tuple[str, dict[Key, float]]:
    reply = httpx.get(server.http_url + "/metrics", timeout=TIMEOUT_S)
    assert reply.status_code == 200
    found = {}
    for family in text_string_to_metric_families(reply.text):
        for s in family.samples:
            found[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return reply.text, found


def key(name: str, **labels: str) -> Key:
    """(The parser reads a counter's sample as name_total; the text keeps Triton's name.)"""
    if TRITON_HELP[name][0] == "counter":
        name += "_total"
    return name, tuple(sorted(labels.items()))


@pytest.fixture(scope="module")
def grps_stub_module(tmp_path_factory: pytest.TempPathFactory) -> Any:
    return generate_stubs(tmp_path_factory.mktemp("grps_stubs"))


def oip_rest(server: ServerProcess) -> None:
    client = triton_http.InferenceServerClient(server.http_url.removeprefix("http://"))
    x = triton_http.InferInput("x", [2], "FP32")
    x.set_data_from_numpy(np.array([1.0, 2.0], np.float32), binary_data=True)
    result = client.infer("half_plus_two", [x])
    assert result.as_numpy("y").tolist() == [2.5, 3.0]
    client.close()


def oip_grpc(server: ServerProcess) -> None:
    assert infer_half_plus_two(server.grpc_address, timeout=TIMEOUT_S).outputs[0].name == "y"


def grps_grpc(server: ServerProcess, stubs: Any, text: str) -> grps_pb2.GrpsMessage:
    with grpc.insecure_channel(server.grpc_address) as channel:
        request = grps_pb2.GrpsMessage(str_data=text, model="grps_faulty")
        reply: grps_pb2.GrpsMessage = stubs.GrpsServiceStub(channel).Predict(
            request, timeout=TIMEOUT_S
        )
        return reply


def test_every_protocol_is_counted_under_tritons_names(
    server: ServerProcess, grps_stub_module: Any
) -> None:
    _, before = scrape(server)
    oip_rest(server)
    oip_grpc(server)
    url = server.http_url
    tfs = httpx.post(f"{url}/v1/models/half_plus_two:predict", json={"instances": [1.0, 2.0]})
    assert tfs.is_success
    grps = f"{url}/grps/v1/infer/predict?model=grps_faulty"
    assert httpx.post(grps, json={"str_data": "hello"}).is_success
    assert httpx.post(grps, json={"str_data": "crash"}).json()["status"]["code"] == 500
    assert grps_grpc(server, grps_stub_module, "hi").status.code == 200
    assert grps_grpc(server, grps_stub_module, "bad").status.code == 400
    text, after = scrape(server)

    def grew(name: str, labels: dict[str, str], **more: str) -> float:
        k = key(name, **labels, **more)
        return after[k] - before.get(k, 0.0)

    assert grew("nv_inference_request_success", HALF) == 3  # OIP REST, OIP gRPC, TF Serving
    assert grew("nv_inference_count", HALF) == 3  # no batching: a request is one inference
    assert grew("nv_inference_exec_count", HALF) == 3
    for name in ("request", "queue", "compute_input", "compute_infer", "compute_output"):
        assert grew(f"nv_inference_{name}_duration_us", HALF) >= 0
    assert grew("nv_inference_request_duration_us", HALF) > 0
    assert grew("nv_inference_compute_infer_duration_us", HALF) > 0
    assert grew("nv_inference_request_success", FAULTY) == 2  # grps REST and gRPC
    failure = "nv_inference_request_failure"
    assert grew(failure, FAULTY, reason="BACKEND") == 1  # RuntimeError in predict: a 500
    assert grew(failure, FAULTY, reason="OTHER") == 1  # ValueError: the client's fault, a 400
    assert grew(failure, FAULTY, reason="REJECTED") == 0
    assert after[key("nv_inference_pending_request_count", **HALF)] == 0
    assert 'nv_inference_request_success{model="half_plus_two",version="123"} ' in text


def test_the_counters_agree_with_the_statistics_extension(server: ServerProcess) -> None:
    oip_rest(server)
    _, got = scrape(server)
    client = triton_http.InferenceServerClient(server.http_url.removeprefix("http://"))
    stats = client.get_inference_statistics("half_plus_two", "123")["model_stats"][0]
    client.close()
    inference = stats["inference_stats"]
    assert got[key("nv_inference_request_success", **HALF)] == inference["success"]["count"]
    assert got[key("nv_inference_count", **HALF)] == stats["inference_count"]
    assert got[key("nv_inference_exec_count", **HALF)] == stats["execution_count"]
    for name, field in (("request", "success"), ("queue", "queue")):
        us = got[key(f"nv_inference_{name}_duration_us", **HALF)]
        assert us == inference[field]["ns"] // 1000


def test_no_line_is_left_unread(server: ServerProcess) -> None:
    text, got = scrape(server)
    samples = [line for line in text.splitlines() if line and not line.startswith("#")]
    assert len(got) == len(samples)  # every sample line read, none merged or dropped


def test_worker_processes_are_summed(tmp_path: Path) -> None:
    shutil.copytree(EXAMPLES / "half_plus_two", tmp_path / "half_plus_two")
    server = start_server(tmp_path, "--workers", "2")
    try:
        for _ in range(6):  # fresh connections, taken by either worker: the sum is the same
            oip_rest(server)
        _, got = scrape(server)
    finally:
        stop_cleanly(server)
    assert got[("rosettaserve_worker_processes", ())] == 2
    assert got[key("nv_inference_request_success", **HALF)] == 6
    assert got[key("nv_inference_exec_count", **HALF)] == 6
    assert got[key("nv_inference_request_duration_us", **HALF)] > 0
