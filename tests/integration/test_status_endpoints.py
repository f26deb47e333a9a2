"""The status page's routes on a real server: the page and its assets from the package, the
JSON it polls (the same counts as /v2/models/stats and /metrics), and grps's monitor endpoints:
the same page at /grps/v1/monitor/metrics and grps's series JSON."""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.conftest import EXAMPLES
from tests.serverproc import ServerProcess, served, start_server

WAIT_S = 30.0


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    repo: Path = tmp_path_factory.mktemp("status_repo")
    shutil.copytree(EXAMPLES / "half_plus_two", repo / "half_plus_two")
    yield from served(start_server(repo))


def infer(url: str, n: int) -> None:
    body = {"inputs": [{"name": "x", "datatype": "FP32", "shape": [2], "data": [1.0, 2.0]}]}
    with httpx.Client(base_url=url) as client:
        for _ in range(n):
            assert client.post("/v2/models/half_plus_two/infer", json=body).status_code == 200


def test_page_and_assets_come_from_the_package(server: ServerProcess) -> None:
    page = httpx.get(server.http_url + "/")
    assert page.status_code == 200
    assert page.headers["content-type"] == "text/html; charset=utf-8"
    assert "default-src 'none'" in page.headers["content-security-policy"]
    assert '<script src="/status/app.js"' in page.text
    assert "http://" not in page.text.replace("http://www.w3.org", "")  # nothing from elsewhere
    js = httpx.get(server.http_url + "/status/app.js")
    assert js.status_code == 200
    assert js.headers["content-type"].startswith("text/javascript")
    assert "/status.json" in js.text
    css = httpx.get(server.http_url + "/status/style.css")
    assert css.status_code == 200
    assert css.headers["content-type"].startswith("text/css")


def test_status_json_counts_what_the_statistics_extension_counts(server: ServerProcess) -> None:
    infer(server.http_url, 7)
    doc = httpx.get(server.http_url + "/status.json").json()
    stats = httpx.get(server.http_url + "/v2/models/half_plus_two/stats").json()
    (model,) = [m for m in doc["models"] if m["name"] == "half_plus_two"]
    (triton,) = stats["model_stats"]
    assert model["version"] == triton["version"] == "123"
    assert model["state"] == "READY"
    assert model["reason"] == ""
    assert model["requests"]["success"] == triton["inference_stats"]["success"]["count"] >= 7
    assert model["latency"]["count"] == model["requests_total"]
    assert model["executions"] == triton["execution_count"]
    assert model["latency"]["p50_ms"] <= model["latency"]["p90_ms"] <= model["latency"]["p99_ms"]
    assert doc["server"]["endpoints"]["http"] == server.http_url
    assert doc["server"]["endpoints"]["grpc"] == server.grpc_address
    assert doc["server"]["endpoints"]["metrics"] == server.http_url + "/metrics"
    assert "histogram" in doc["percentile_method"]


def test_grps_monitor_page_is_the_status_page(server: ServerProcess) -> None:
    root = httpx.get(server.http_url + "/")
    grps = httpx.get(server.http_url + "/grps/v1/monitor/metrics")
    assert grps.status_code == 200
    assert grps.content == root.content


def test_grps_series_has_grps_shape_and_sees_the_traffic(server: ServerProcess) -> None:
    url = server.http_url + "/grps/v1/monitor/series"
    first = httpx.get(url, params={"name": "*qps"})  # starts the sampler
    assert first.status_code == 200
    assert first.json()["label"] == "trend"
    assert [p[0] for p in first.json()["data"]] == list(range(174))
    deadline = time.monotonic() + WAIT_S
    while True:  # the sampler reads the counters once a second: the traffic shows up
        infer(server.http_url, 5)
        data = httpx.get(url, params={"name": "*qps"}).json()["data"]
        if any(v > 0 for _, v in data[-60:]):
            break
        assert time.monotonic() < deadline, data
        time.sleep(0.2)
    cdf = httpx.get(url, params={"name": "*latency_cdf(ms)"}).json()
    assert cdf["label"] == "cdf"
    xs = [p[0] for p in cdf["data"]]
    assert xs == [*range(10, 91, 10), *range(91, 100), 100, 101]
    for name in ("*fail_rate(%)", "*latency_avg(ms)", "*cpu_usage(%)", "*mem_usage(%)"):
        assert len(httpx.get(url, params={"name": name}).json()["data"]) == 174


def test_grps_series_of_an_unknown_metric_is_a_grps_404(server: ServerProcess) -> None:
    reply = httpx.get(server.http_url + "/grps/v1/monitor/series", params={"name": "nope"})
    assert reply.status_code == 404
    status = reply.json()["status"]
    assert status["code"] == 404
    assert status["status"] == "FAILURE"
    assert "nope" in status["msg"]
    assert "*qps" in status["msg"]


@pytest.mark.parametrize("accept", ["identity", "gzip"])
def test_head_of_the_page_has_its_length_and_no_body(server: ServerProcess, accept: str) -> None:
    headers = {"Accept-Encoding": accept}  # gzip: the page is compressed, for HEAD as for GET
    get = httpx.get(server.http_url + "/", headers=headers)
    head = httpx.head(server.http_url + "/", headers=headers)
    assert head.status_code == 200
    assert head.headers.get("content-encoding") == get.headers.get("content-encoding")
    assert head.headers["content-length"] == get.headers["content-length"]
    if accept == "identity":
        assert head.headers["content-length"] == str(len(get.content))
    assert head.content == b""


def test_with_workers_the_counts_are_summed_over_them(tmp_path: Path) -> None:
    shutil.copytree(EXAMPLES / "half_plus_two", tmp_path / "half_plus_two")
    server = start_server(tmp_path, "--workers", "2")
    try:
        for _ in range(40):  # a connection each: the workers share them
            infer(server.http_url, 1)
        doc = httpx.get(server.http_url + "/status.json").json()
        (model,) = doc["models"]
        assert doc["server"]["workers"] == doc["server"]["processes_reporting"] == 2
        assert model["requests"]["success"] == 40
        assert any("worker" in note for note in doc["not_measured"])
    finally:
        assert server.stop() == 0
