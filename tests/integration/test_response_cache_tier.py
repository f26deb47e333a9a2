"""The response cache's first tier (protocols/oip/answer_tier.py) on a real server, with
tritonclient.http and raw HTTP (gRPC: tests_tritongrpc/test_response_cache_tritongrpc.py): a hit
answers the bytes of the model's answer and counts as a hit; a request that differs in a byte or
in the header the route reads is not answered from another's entry; a request naming shared
memory is never answered by the tier (its region's contents change under the same bytes); a
model loaded again starts empty."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import numpy as np
import pytest
import tritonclient.http as httpclient
import tritonclient.utils.shared_memory as shm

from tests.response_cache_support import cache_repo, calls, inputs
from tests.serverproc import ServerProcess, served, start_server
from tests.shm_support import Regions, regions

__all__ = ["regions"]  # the fixture, used by name
TIMEOUT_S = 30.0


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    repo = cache_repo(tmp_path_factory.mktemp("tier_repo"))
    args = ("--cache-size", "1048576", "--no-strict-readiness", "--allow-client-shm")
    yield from served(start_server(repo, *args, "--enable-model-control"))


@pytest.fixture(scope="module")
def rest(server: ServerProcess) -> Iterator[httpclient.InferenceServerClient]:
    with httpclient.InferenceServerClient(server.http_hostport) as client:
        yield client


def run_stats(client: httpclient.InferenceServerClient) -> dict[str, Any]:
    found: dict[str, Any] = client.get_inference_statistics("cached")["model_stats"][0]
    return found


def counts(client: httpclient.InferenceServerClient) -> tuple[int, int, int, int]:
    """cache hits, cache misses, successes and model executions of ``cached``."""
    found = run_stats(client)
    run = found["inference_stats"]
    return (
        run["cache_hit"]["count"],
        run["cache_miss"]["count"],
        run["success"]["count"],
        found["execution_count"],
    )


def test_a_rest_hit_answers_the_models_bytes_and_counts_as_a_hit(
    server: ServerProcess, rest: httpclient.InferenceServerClient
) -> None:
    body = {
        "id": "r1",
        "inputs": [
            {"name": "X", "datatype": "FP32", "shape": [2], "data": [0.5, 2.0]},
            {"name": "T", "datatype": "BYTES", "shape": [1], "data": ["tier"]},
        ],
    }
    url = f"{server.http_url}/v2/models/cached/infer"
    before = counts(rest)
    first = httpx.post(url, json=body, timeout=TIMEOUT_S)
    second = httpx.post(url, json=body, timeout=TIMEOUT_S)
    assert first.status_code == second.status_code == 200
    assert second.content == first.content
    assert first.json()["outputs"][0]["data"] == [1.0, 4.0]
    hits, misses, successes, executions = counts(rest)
    assert (hits, misses) == (before[0] + 1, before[1] + 1)
    assert (successes, executions) == (before[2] + 2, before[3] + 1)
    assert run_stats(rest)["inference_stats"]["cache_hit"]["ns"] > 0


def test_binary_answers_keep_their_header_length(rest: httpclient.InferenceServerClient) -> None:
    outputs = [httpclient.InferRequestedOutput(n, binary_data=True) for n in ("OUT", "TEXT")]
    first = rest.infer("cached", inputs(httpclient, [3.0, 1.0], [b"x"]), outputs=outputs)
    second = rest.infer("cached", inputs(httpclient, [3.0, 1.0], [b"x"]), outputs=outputs)
    assert second.as_numpy("OUT").tolist() == first.as_numpy("OUT").tolist() == [6.0, 2.0]
    assert second.as_numpy("TEXT").tolist() == [b"x!"]


def test_another_id_or_another_header_is_not_answered_from_the_entry(
    server: ServerProcess,
) -> None:
    url = f"{server.http_url}/v2/models/cached/infer"
    doc = (
        b'{"id":"%s","inputs":[{"name":"X","datatype":"FP32","shape":[1],'
        b'"parameters":{"binary_data_size":4}},'
        b'{"name":"T","datatype":"BYTES","shape":[1],"data":["h"]}]}'
    )
    json_part = doc % b"a"
    body = json_part + np.array([1.5], np.float32).tobytes()
    header = {"Inference-Header-Content-Length": str(len(json_part))}
    first = httpx.post(url, content=body, headers=header, timeout=TIMEOUT_S)
    assert first.status_code == 200
    assert httpx.post(url, content=body, headers=header, timeout=TIMEOUT_S).content == first.content
    # the very bytes, read with another split: no entry answers it (it is not valid JSON)
    wrong = {"Inference-Header-Content-Length": str(len(json_part) - 1)}
    assert httpx.post(url, content=body, headers=wrong, timeout=TIMEOUT_S).status_code == 400
    other = (doc % b"b") + np.array([1.5], np.float32).tobytes()
    header = {"Inference-Header-Content-Length": str(len(doc % b"b"))}
    answer = httpx.post(url, content=other, headers=header, timeout=TIMEOUT_S).json()
    assert answer["id"] == "b"
    assert answer["outputs"] == first.json()["outputs"]


def test_a_request_naming_shared_memory_reads_the_region_each_time(
    rest: httpclient.InferenceServerClient, regions: Regions
) -> None:
    handle, key = regions.create("x", 8)
    rest.register_system_shared_memory("x", key, 8)
    try:
        for values, doubled in (([1.0, 2.0], [2.0, 4.0]), ([5.0, 7.0], [10.0, 14.0])):
            shm.set_shared_memory_region(handle, [np.array(values, np.float32)])
            x, t = inputs(httpclient, values, [b"s"])
            x.set_shared_memory("x", 8)
            assert rest.infer("cached", [x, t]).as_numpy("OUT").tolist() == doubled
    finally:
        rest.unregister_system_shared_memory("x")


def test_a_model_loaded_again_starts_without_entries(
    rest: httpclient.InferenceServerClient,
) -> None:
    first = rest.infer("cached", inputs(httpclient, [8.5], [b"r"]))
    assert calls(rest.infer("cached", inputs(httpclient, [8.5], [b"r"]))) == calls(first)
    rest.unload_model("cached")
    rest.load_model("cached")
    assert calls(rest.infer("cached", inputs(httpclient, [8.5], [b"r"]))) == 1  # it ran again
