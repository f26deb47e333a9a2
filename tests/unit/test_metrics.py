"""The metrics registry and its Prometheus text, read back with prometheus_client's own parser."""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np
import pytest

from rosettaserve import Model
from rosettaserve.core.call import PROTOCOL, Call
from rosettaserve.core.dataplane import DataPlane
from rosettaserve.core.errors import InvalidInput
from rosettaserve.core.invoker import Invoker
from rosettaserve.core.registry import ModelVersion, VersionState
from rosettaserve.core.types import InferenceRequest, Tensor, TensorSpec
from rosettaserve.observability.metrics import Metrics, render
from tests.unit.metrics_support import Key, OneModel, samples

MS = 1_000_000  # ns


def key(name: str, **labels: str) -> Key:
    return name, tuple(sorted(labels.items()))


def version(name: str = "m", state: VersionState = VersionState.READY) -> ModelVersion:
    return ModelVersion(name=name, version="1", runtime="python", state=state)


def test_counts_and_histograms_by_model_version_protocol_and_outcome() -> None:
    metrics, mv = Metrics(), version()
    ran = Call(start=0, submitted=MS // 10, ran=MS // 5, done=2 * MS)  # queued 0.1 ms, ran 1.8
    metrics.observe(mv, "oip_rest", "success", ran, 3 * MS)
    metrics.observe(mv, "oip_rest", "success", ran, 30 * MS)
    metrics.observe(mv, "oip_grpc", "deadline_exceeded", Call(start=0), 700 * MS)
    got = samples(render([metrics.snapshot([mv])]))
    base = {"model": "m", "version": "1"}
    rest = {**base, "protocol": "oip_rest"}
    assert got[key("rosettaserve_requests_total", **rest, outcome="success")] == 2
    grpc = {**base, "protocol": "oip_grpc"}
    assert got[key("rosettaserve_requests_total", **grpc, outcome="deadline_exceeded")] == 1
    latency = "rosettaserve_request_duration_seconds"
    assert got[key(latency + "_bucket", **rest, le="0.0025")] == 0
    assert got[key(latency + "_bucket", **rest, le="0.005")] == 1
    assert got[key(latency + "_bucket", **rest, le="0.05")] == 2
    assert got[key(latency + "_count", **rest)] == 2
    assert abs(got[key(latency + "_sum", **rest)] - 0.033) < 1e-9
    assert got[key(latency + "_bucket", **grpc, le="0.5")] == 0
    assert got[key(latency + "_bucket", **grpc, le="1")] == 1
    queue = "rosettaserve_queue_duration_seconds"
    assert got[key(queue + "_count", **base)] == 2  # the request that never ran has none
    assert got[key(queue + "_bucket", **base, le="0.0001")] == 2
    compute = "rosettaserve_compute_duration_seconds"
    assert got[key(compute + "_bucket", **base, le="0.001")] == 0
    assert got[key(compute + "_bucket", **base, le="0.0025")] == 2


def test_gauges_states_and_batch_sizes_come_from_the_served_versions() -> None:
    metrics, mv = Metrics(), version()
    mv.inflight = 3
    for size, times in ((1, 2), (4, 1), (24, 3)):
        for _ in range(times):
            mv.stats.record_execution(size, 0, 1, 0)
    loading = version("n", VersionState.LOADING)
    got = samples(render([metrics.snapshot([mv, loading])]))
    base = {"model": "m", "version": "1"}
    assert got[key("rosettaserve_inflight_requests", **base)] == 3
    assert got[key("rosettaserve_model_state", **base, state="READY")] == 1
    assert got[key("rosettaserve_model_state", **base, state="LOADING")] == 0
    assert got[key("rosettaserve_model_state", model="n", version="1", state="LOADING")] == 1
    batch = "rosettaserve_batch_size"
    assert got[key(batch + "_bucket", **base, le="1")] == 2
    assert got[key(batch + "_bucket", **base, le="4")] == 3
    assert got[key(batch + "_bucket", **base, le="16")] == 3
    assert got[key(batch + "_bucket", **base, le="32")] == 6
    assert got[key(batch + "_count", **base)] == 6
    assert got[key(batch + "_sum", **base)] == 2 + 4 + 72


def test_worker_snapshots_are_summed() -> None:
    one, two, mv = Metrics(), Metrics(), version()
    call = Call(start=0, submitted=1, ran=2, done=3)
    one.observe(mv, "grps_rest", "success", call, MS)
    two.observe(mv, "grps_rest", "success", call, MS)
    two.observe(mv, "grps_rest", "invalid_argument", Call(start=0), MS)
    got = samples(render([one.snapshot([mv]), two.snapshot([mv])]))
    labels = {"model": "m", "version": "1", "protocol": "grps_rest"}
    assert got[key("rosettaserve_requests_total", **labels, outcome="success")] == 2
    assert got[key("rosettaserve_requests_total", **labels, outcome="invalid_argument")] == 1
    assert got[key("rosettaserve_request_duration_seconds_count", **labels)] == 3
    assert got[key("rosettaserve_model_state", model="m", version="1", state="READY")] == 2
    assert got[key("rosettaserve_worker_processes")] == 2
    assert got[key("process_resident_memory_bytes")] > 0


def test_label_values_are_escaped() -> None:
    metrics, mv = Metrics(), version('we"ird\\name')
    metrics.observe(mv, "oip_rest", "success", Call(start=0), MS)
    got = samples(render([metrics.snapshot([mv])]))
    assert got[key("rosettaserve_model_state", model='we"ird\\name', version="1", state="READY")]


class Doubler(Model):
    def predict(self, inputs: dict[str, np.ndarray]) -> Any:
        if inputs["X"][0] < 0:
            raise ValueError("negative")
        return {"Y": inputs["X"] * 2}


def test_the_data_plane_reports_every_request_with_its_protocol() -> None:
    mv = version()
    mv.model, mv.invoker = Doubler(), Invoker(Doubler())
    mv.inputs, mv.outputs = [TensorSpec("X", "INT32", (-1,))], [TensorSpec("Y", "INT32", (-1,))]
    dp = DataPlane(OneModel(mv))
    dp.started = True
    metrics = dp.observer = Metrics()

    def request(value: int, protocol: str) -> InferenceRequest:
        x = np.array([value], np.int32)
        return InferenceRequest("m", [Tensor("X", "INT32", (1,), x)], context={PROTOCOL: protocol})

    async def body() -> None:
        await dp.infer(request(1, "oip_rest"))
        await dp.infer(request(2, "tfserving_rest"))
        with pytest.raises(InvalidInput):
            await dp.infer(request(-1, "oip_rest"))

    asyncio.run(body())
    got = samples(render([metrics.snapshot([mv])]))
    total = "rosettaserve_requests_total"
    base = {"model": "m", "version": "1"}
    assert got[key(total, **base, protocol="oip_rest", outcome="success")] == 1
    assert got[key(total, **base, protocol="tfserving_rest", outcome="success")] == 1
    assert got[key(total, **base, protocol="oip_rest", outcome="invalid_argument")] == 1
    assert got[key("rosettaserve_compute_duration_seconds_count", **base)] == 3
