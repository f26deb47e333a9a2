"""GET /metrics on a real server: counts by protocol and outcome after requests over every tensor
protocol, histograms and gauges, the Prometheus text format, and --metrics-port."""

from __future__ import annotations

import shutil
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import EXAMPLES
from tests.integration.oip_grpc_support import infer_half_plus_two
from tests.serverproc import ServerProcess, start_server

Key = tuple[str, tuple[tuple[str, str], ...]]


def scrape(url: str) -> dict[Key, float]:
    reply = httpx.get(url)
    assert reply.status_code == 200
    assert reply.headers["content-type"].startswith("text/plain; version=0.0.4")
    found = {}
    for family in text_string_to_metric_families(reply.text):
        for s in family.samples:
            found[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return found


def key(name: str, **labels: str) -> Key:
    return name, tuple(sorted(labels.items()))


def delta(before: dict[Key, float], after: dict[Key, float], k: Key) -> float:
    return after.get(k, 0.0) - before.get(k, 0.0)


def oip_body(values: list[float]) -> dict[str, object]:
    return {"inputs": [{"name": "x", "datatype": "FP32", "shape": [len(values)], "data": values}]}


def test_requests_are_counted_by_protocol_and_outcome(server: ServerProcess) -> None:
    url = server.http_url
    before = scrape(url + "/metrics")
    for _ in range(3):
        assert httpx.post(f"{url}/v2/models/half_plus_two/infer", json=oip_body([1.0])).is_success
    bad = httpx.post(
        f"{url}/v2/models/half_plus_two/infer", json=oip_body([1.0]) | {"outputs": [{"name": "z"}]}
    )
    assert bad.status_code == 400
    tfs = httpx.post(f"{url}/v1/models/half_plus_two:predict", json={"instances": [1.0, 2.0]})
    assert tfs.is_success
    infer_half_plus_two(server.grpc_address)
    grps = httpx.post(f"{url}/grps/v1/infer/predict?model=greeter_python", json={"str_data": "x"})
    assert grps.is_success
    after = scrape(url + "/metrics")

    model = {"model": "half_plus_two", "version": "123"}
    total = "rosettaserve_requests_total"
    expected = {
        ("oip_rest", "success"): 3,
        ("oip_rest", "invalid_argument"): 1,
        ("tfserving_rest", "success"): 1,
        ("oip_grpc", "success"): 1,
    }
    for (protocol, outcome), count in expected.items():
        k = key(total, **model, protocol=protocol, outcome=outcome)
        assert delta(before, after, k) == count, (protocol, outcome)
    greeter = {"model": "greeter_python", "version": "1", "protocol": "grps_rest"}
    assert delta(before, after, key(total, **greeter, outcome="success")) == 1
    latency = key("rosettaserve_request_duration_seconds_count", **model, protocol="oip_rest")
    assert delta(before, after, latency) == 4
    compute = key("rosettaserve_compute_duration_seconds_count", **model)
    assert delta(before, after, compute) == 5  # every request that ran (the 400 never did)
    assert delta(before, after, key("rosettaserve_batch_size_count", **model)) == 5
    assert after[key("rosettaserve_model_state", **model, state="READY")] == 1
    assert after[key("rosettaserve_inflight_requests", **model)] == 0
    assert after[key("rosettaserve_worker_processes")] == 1


def test_metrics_port_serves_metrics_apart_from_the_http_port(tmp_path: Path) -> None:
    shutil.copytree(EXAMPLES / "half_plus_two", tmp_path / "half_plus_two")
    server = start_server(tmp_path, "--metrics-port", "0")
    try:
        line = next(ln for ln in server.lines if ln.startswith("metrics: "))
        metrics_url = line.split(" ", 1)[1]
        body = oip_body([2.0])
        assert httpx.post(f"{server.http_url}/v2/models/half_plus_two/infer", json=body).is_success
        got = scrape(metrics_url)
        labels = {"model": "half_plus_two", "version": "123", "protocol": "oip_rest"}
        assert got[key("rosettaserve_requests_total", **labels, outcome="success")] == 1
        assert httpx.get(server.http_url + "/metrics").status_code == 404
    finally:
        assert server.stop() == 0
