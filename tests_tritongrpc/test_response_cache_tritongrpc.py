"""The response cache over gRPC with ``tritonclient.grpc`` (REST: tests/integration/
test_response_cache.py): an answer cached for a REST request answers the same inputs over gRPC,
unary and streaming; ModelStatistics shows the hits; a repeated ModelInfer is answered from
its bytes (the first tier, protocols/oip/answer_tier.py)."""

from __future__ import annotations

import queue
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import tritonclient.grpc as grpcclient

from tests.response_cache_support import cache_repo, calls, inputs
from tests.serverproc import ServerProcess, served, start_server

TIMEOUT_S = 30.0


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    repo: Path = cache_repo(tmp_path_factory.mktemp("cache_repo"))
    yield from served(start_server(repo, "--cache-size", "1048576", "--no-strict-readiness"))


@pytest.fixture(scope="module")
def grpc(server: ServerProcess) -> Iterator[grpcclient.InferenceServerClient]:
    with grpcclient.InferenceServerClient(server.grpc_address) as client:
        yield client


def cache_hits(grpc: grpcclient.InferenceServerClient) -> Any:
    return grpc.get_inference_statistics("cached").model_stats[0].inference_stats.cache_hit


def test_an_answer_cached_over_rest_answers_grpc(
    server: ServerProcess, grpc: grpcclient.InferenceServerClient
) -> None:
    body = {
        "inputs": [
            {"name": "X", "datatype": "FP32", "shape": [2], "data": [4.0, 5.0]},
            {"name": "T", "datatype": "BYTES", "shape": [2], "data": ["a", "bc"]},
        ]
    }
    url = f"{server.http_url}/v2/models/cached/infer"
    by_rest = httpx.post(url, json=body, timeout=TIMEOUT_S).json()
    hits = cache_hits(grpc)
    by_grpc = grpc.infer("cached", inputs(grpcclient, [4.0, 5.0], [b"a", b"bc"]))
    outputs = {o["name"]: o["data"] for o in by_rest["outputs"]}
    assert calls(by_grpc) == outputs["CALL"][0]
    assert by_grpc.as_numpy("OUT").tolist() == outputs["OUT"] == [8.0, 10.0]
    after = cache_hits(grpc)
    assert after.count == hits.count + 1
    assert after.ns > hits.ns


def test_a_grpc_stream_is_answered_from_the_cache_too(
    grpc: grpcclient.InferenceServerClient,
) -> None:
    answers: queue.Queue[Any] = queue.Queue()
    grpc.start_stream(callback=lambda result, error: answers.put(error or result))
    try:
        for _ in range(2):
            grpc.async_stream_infer("cached", inputs(grpcclient, [6.0], [b"s"]))
        first, second = (answers.get(timeout=TIMEOUT_S) for _ in range(2))
    finally:
        grpc.stop_stream()
    assert calls(second) == calls(first)
    assert second.as_numpy("TEXT").tolist() == [b"s!"]


def test_a_repeated_modelinfer_is_answered_from_its_bytes(server: ServerProcess) -> None:
    """The first tier (protocols/oip/answer_tier.py): the same message again answers the very
    reply, as a hit; another request id is another message (answered by the tensor path, with
    its own id)."""
    with (
        grpcclient.InferenceServerClient(server.grpc_address) as client,
        httpx.Client(base_url=server.http_url) as rest,
    ):
        path = "/v2/models/cached/stats"
        before = rest.get(path).json()["model_stats"][0]["inference_stats"]
        first = client.infer("cached", inputs(grpcclient, [4.0], [b"g"]), request_id="g1")
        second = client.infer("cached", inputs(grpcclient, [4.0], [b"g"]), request_id="g1")
        assert second.get_response() == first.get_response()
        assert calls(second) == calls(first)
        assert second.as_numpy("OUT").tolist() == [8.0]
        other = client.infer("cached", inputs(grpcclient, [4.0], [b"g"]), request_id="g2")
        assert other.get_response().id == "g2"
        after = rest.get(path).json()["model_stats"][0]["inference_stats"]
    assert after["cache_hit"]["count"] == before["cache_hit"]["count"] + 2
    assert after["cache_miss"]["count"] == before["cache_miss"]["count"] + 1
    assert after["success"]["count"] == before["success"]["count"] + 3
