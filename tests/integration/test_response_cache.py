"""Triton's response cache on a real server (``--cache-size``, ``response_cache: true``), with
tritonclient.http (gRPC: tests_tritongrpc/test_response_cache_tritongrpc.py): a repeated request
is answered without the model (its answer's bytes equal); hits and misses in the statistics
extension and in /metrics under Triton's names; a model without response_cache, or a server
without --cache-size, runs every request; a streaming model asking for it fails its load."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import tritonclient.http as httpclient
from prometheus_client.parser import text_string_to_metric_families

from tests.response_cache_support import cache_repo, calls, inputs
from tests.serverproc import ServerProcess, served, start_server

TIMEOUT_S = 30.0


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return cache_repo(tmp_path_factory.mktemp("cache_repo"))


@pytest.fixture(scope="module")
def server(repo: Path) -> Iterator[ServerProcess]:
    yield from served(start_server(repo, "--cache-size", "1048576", "--no-strict-readiness"))


@pytest.fixture(scope="module")
def rest(server: ServerProcess) -> Iterator[httpclient.InferenceServerClient]:
    with httpclient.InferenceServerClient(server.http_hostport) as client:
        yield client


def rest_infer(
    client: httpclient.InferenceServerClient, name: str, values: list[float], **kw: Any
) -> Any:
    return client.infer(name, inputs(httpclient, values, [b"a", b"bc"]), **kw)


def stats(client: Any, name: str) -> dict[str, Any]:
    found: dict[str, Any] = client.get_inference_statistics(name)["model_stats"][0]
    return found


def test_a_repeated_request_is_answered_from_the_cache_with_the_same_bytes(
    rest: httpclient.InferenceServerClient,
) -> None:
    before = stats(rest, "cached")
    first = rest_infer(rest, "cached", [1.5, -2.0, 3.25])
    second = rest_infer(rest, "cached", [1.5, -2.0, 3.25])
    assert calls(second) == calls(first)  # the model did not run again
    for name in ("OUT", "CALL"):
        assert second.as_numpy(name).tobytes() == first.as_numpy(name).tobytes()
    assert second.as_numpy("TEXT").tolist() == first.as_numpy("TEXT").tolist() == [b"a!", b"bc!"]
    after = stats(rest, "cached")
    run = after["inference_stats"]
    assert run["cache_hit"]["count"] == before["inference_stats"]["cache_hit"]["count"] + 1
    assert run["cache_miss"]["count"] == before["inference_stats"]["cache_miss"]["count"] + 1
    assert run["cache_hit"]["ns"] > 0
    assert run["cache_miss"]["ns"] > 0
    assert run["success"]["count"] == before["inference_stats"]["success"]["count"] + 2
    # as Triton counts them: the hit is no inference, no execution and has no compute time
    assert after["inference_count"] == before["inference_count"] + 1
    assert after["execution_count"] == before["execution_count"] + 1
    compute = run["compute_infer"]["count"]
    assert compute == before["inference_stats"]["compute_infer"]["count"] + 1


def test_a_hit_answers_the_very_bytes_of_the_first_answer(server: ServerProcess) -> None:
    body = {
        "id": "same",
        "inputs": [
            {"name": "X", "datatype": "FP32", "shape": [2], "data": [0.1, 1e-7]},
            {"name": "T", "datatype": "BYTES", "shape": [1], "data": ["w\u00f6rld"]},
        ],
    }
    url = f"{server.http_url}/v2/models/cached/infer"
    first, second = (httpx.post(url, json=body, timeout=TIMEOUT_S) for _ in range(2))
    assert first.status_code == second.status_code == 200
    assert second.content == first.content
    body["id"] = "other"  # the id is the request's own, not the cached one's
    third = httpx.post(url, json=body, timeout=TIMEOUT_S).json()
    assert third["id"] == "other"
    assert third["outputs"] == first.json()["outputs"]


def test_other_inputs_miss_and_outputs_are_chosen_from_the_cached_answer(
    rest: httpclient.InferenceServerClient,
) -> None:
    first = rest_infer(rest, "cached", [7.0])
    other = rest_infer(rest, "cached", [7.0, 0.0])
    assert calls(other) == calls(first) + 1
    just_out = rest_infer(rest, "cached", [7.0], outputs=[httpclient.InferRequestedOutput("OUT")])
    assert just_out.as_numpy("OUT").tolist() == [14.0]
    assert just_out.as_numpy("CALL") is None
    again = rest_infer(rest, "cached", [7.0])
    assert calls(again) == calls(first)


def test_a_model_without_response_cache_runs_every_request(
    rest: httpclient.InferenceServerClient,
) -> None:
    first = rest_infer(rest, "uncached", [1.0])
    second = rest_infer(rest, "uncached", [1.0])
    assert calls(second) == calls(first) + 1
    run = stats(rest, "uncached")["inference_stats"]
    assert run["cache_hit"]["count"] == 0
    assert run["cache_miss"]["count"] == 0


def metric_samples(server: ServerProcess) -> dict[tuple[str, str], float]:
    text = httpx.get(server.http_url + "/metrics", timeout=TIMEOUT_S).text
    return {
        (s.name, s.labels.get("model", "")): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_metrics_show_hits_and_misses_under_tritons_names(
    server: ServerProcess, rest: httpclient.InferenceServerClient
) -> None:
    rest_infer(rest, "cached", [9.0])
    rest_infer(rest, "cached", [9.0])
    run = stats(rest, "cached")["inference_stats"]
    found = metric_samples(server)
    assert found[("nv_cache_num_hits_per_model_total", "cached")] == run["cache_hit"]["count"]
    assert found[("nv_cache_num_misses_per_model_total", "cached")] == run["cache_miss"]["count"]
    hit_us = found[("nv_cache_hit_duration_per_model_total", "cached")]
    assert hit_us == run["cache_hit"]["ns"] // 1000
    miss_us = found[("nv_cache_miss_duration_per_model_total", "cached")]
    assert miss_us == run["cache_miss"]["ns"] // 1000
    assert ("nv_cache_num_hits_per_model_total", "uncached") not in found


def test_a_streaming_model_asking_for_the_cache_fails_its_load(server: ServerProcess) -> None:
    meta = httpx.get(f"{server.http_url}/v2/models/streaming", timeout=TIMEOUT_S).json()
    assert meta["properties"]["state"] == "UNAVAILABLE"
    assert "response cache does not serve a model that streams" in meta["properties"]["reason"]


def test_without_cache_size_nothing_is_cached(repo: Path) -> None:
    proc = start_server(repo, "--no-strict-readiness")
    try:
        with httpclient.InferenceServerClient(proc.http_hostport) as client:
            first = rest_infer(client, "cached", [1.0])
            assert calls(rest_infer(client, "cached", [1.0])) == calls(first) + 1
            assert stats(client, "cached")["inference_stats"]["cache_miss"]["count"] == 0
        assert ("nv_cache_num_hits_per_model_total", "cached") not in metric_samples(proc)
    finally:
        assert proc.stop() == 0, "\n".join(proc.lines)
