"""Queue limits and timeouts in a real server: 429 with Retry-After (RESOURCE_EXHAUSTED over
gRPC) at once beyond the limit; 504 (DEADLINE_EXCEEDED) when a request's timeout passes, and the
work is dropped: a request that timed out in the queue never reaches the model."""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import httpx
import numpy as np
import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from rosettaserve.protocols.oip.pb import grpc_service_pb2 as pb
from tests.conftest import TEST_MODELS
from tests.integration.gated import (
    Gate,
    gated_model,
    in_threads,
    model_infer,
    rest_infer,
    serve_gated,
    wait_for,
)
from tests.serverproc import ServerProcess, start_server

SLOW_BODY = {"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [2], "data": [1, 2]}]}


def body(x: float, **parameters: Any) -> dict[str, Any]:
    tensor = {"name": "INPUT0", "datatype": "FP32", "shape": [1, 2], "data": [x, x]}
    return {"inputs": [tensor], "parameters": parameters}


def grpc_request(x: float, **parameters: int) -> Any:
    msg = pb.ModelInferRequest(model_name="limited")
    msg.inputs.add(name="INPUT0", datatype="FP32", shape=[1, 2]).contents.fp32_contents.extend(
        [x, x]
    )
    for key, value in parameters.items():
        msg.parameters[key].int64_param = value
    return msg


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    repo = tmp_path_factory.mktemp("backpressure")
    gated_model(repo, "limited", "max_batch_size: 4\ndynamic_batching: {}\nmax_queue_size: 2\n")
    return repo


@pytest.fixture(scope="module")
def server(repo: Path) -> Iterator[ServerProcess]:
    yield from serve_gated(repo)


@pytest.fixture
def infer_stub(server: ServerProcess) -> Iterator[Any]:
    with grpc.insecure_channel(server.grpc_address) as channel:
        yield model_infer(channel)


def hold_with_queue(gate: Gate, queued: int) -> list[Any]:
    """The model held on one request, ``queued`` more waiting; returns the threads."""
    before = len(gate.executions())
    gate.hold.touch()
    first, _ = in_threads([lambda: rest_infer(gate.server, gate.model, np.zeros((1, 2), "f4"))])
    wait_for(lambda: len(gate.executions()) == before + 1, "the first request runs")
    calls: list[Callable[[], Any]] = [
        (lambda i=i: rest_infer(gate.server, gate.model, np.full((1, 2), i, "f4")))
        for i in range(queued)
    ]
    threads, _ = in_threads(calls)
    wait_for(lambda: gate.queued() == queued, f"{queued} queued")
    return [*first, *threads]


def release(gate: Gate, threads: list[Any]) -> None:
    gate.hold.unlink()
    for t in threads:
        t.join(60)


def test_beyond_the_queue_limit_429_with_retry_after_and_resource_exhausted(
    server: ServerProcess, repo: Path, infer_stub: Any
) -> None:
    gate = Gate(server, repo, "limited")
    threads = hold_with_queue(gate, 2)
    try:
        refused = httpx.post(f"{server.http_url}/v2/models/limited/infer", json=body(5.0))
        assert refused.status_code == 429
        assert refused.headers["retry-after"] == "1"
        assert "overloaded" in refused.json()["error"]
        with pytest.raises(grpc.RpcError) as caught:
            infer_stub(grpc_request(5.0), timeout=30)
        assert caught.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert ("retry-after", "1") in tuple(caught.value.trailing_metadata() or ())
        tfs = httpx.post(
            f"{server.http_url}/v1/models/limited:predict", json={"instances": [[5.0, 5.0]]}
        )
        assert tfs.status_code == 429
    finally:
        release(gate, threads)
    metrics = httpx.get(server.http_url + "/metrics").text
    assert 'protocol="oip_rest",outcome="overloaded"} 1' in metrics
    assert 'protocol="oip_grpc",outcome="overloaded"} 1' in metrics
    assert 'protocol="tfserving_rest",outcome="overloaded"} 1' in metrics
    ok = httpx.post(f"{server.http_url}/v2/models/limited/infer", json=body(1.0))
    assert ok.status_code == 200


def test_timeout_while_queued_504_and_the_model_never_sees_it(
    server: ServerProcess, repo: Path, infer_stub: Any
) -> None:
    gate = Gate(server, repo, "limited")
    threads = hold_with_queue(gate, 0)
    try:
        late = httpx.post(
            f"{server.http_url}/v2/models/limited/infer", json=body(42.0, timeout=50_000)
        )
        assert late.status_code == 504
        assert "expired while queued" in late.json()["error"]
        with pytest.raises(grpc.RpcError) as caught:
            infer_stub(grpc_request(43.0, timeout=50_000), timeout=30)
        assert caught.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
        inp = httpclient.InferInput("INPUT0", [1, 2], "FP32")
        inp.set_data_from_numpy(np.full((1, 2), 44.0, np.float32))
        with pytest.raises(InferenceServerException, match="expired while queued") as triton:
            httpclient.InferenceServerClient(server.http_hostport).infer(
                "limited", [inp], timeout=50_000
            )
        assert triton.value.status() == "504"
        assert gate.queued() == 0  # all three left the queue
    finally:
        release(gate, threads)
    assert httpx.post(f"{server.http_url}/v2/models/limited/infer", json=body(1.0)).is_success
    assert 1.0 in gate.values()  # the log records what the model saw ...
    assert not {42.0, 43.0, 44.0} & gate.values()  # ... and it never saw the timed-out requests
    stats = httpx.get(server.http_url + "/v2/models/limited/stats").json()["model_stats"][0]
    assert stats["inference_stats"]["fail"]["count"] >= 2


def test_server_default_timeout_and_queue_limit_flags(tmp_path: Path) -> None:
    shutil.copytree(TEST_MODELS / "slow_python", tmp_path / "slow_python")
    server = start_server(tmp_path, "--request-timeout", "0.2", "--max-queue-size", "1")
    url = f"{server.http_url}/v2/models/slow_python/infer"
    try:
        timed_out = httpx.post(url, json={**SLOW_BODY, "parameters": {"sleep": 2.0}}, timeout=30)
        assert timed_out.status_code == 504
        assert "timeout of 200 ms" in timed_out.json()["error"]
        own = {**SLOW_BODY, "parameters": {"sleep": 3.0, "timeout": 0}}  # the request's own: none
        threads, results = in_threads([lambda: httpx.post(url, json=own, timeout=30)])
        wait_for(
            lambda: (
                "rosettaserve_inflight_requests" in (text := _metrics(server))
                and 'inflight_requests{model="slow_python",version="1"} 1' in text
            ),
            "one request in the model",
        )
        refused = httpx.post(url, json=SLOW_BODY, timeout=30)
        assert refused.status_code == 429
        assert refused.headers["retry-after"] == "1"
        threads[0].join(30)
        assert results[0].status_code == 200
    finally:
        assert server.stop() == 0


def _metrics(server: ServerProcess) -> str:
    return httpx.get(server.http_url + "/metrics").text
