"""The tensor figures on /metrics under Triton's names: derived at scrape time from the requests
counted by outcome and from the versions' statistics (the same numbers /v2/models/stats answers),
failures by Triton's reason, summed over worker snapshots; and every line of the whole exposition
is one that prometheus_client's parser reads as a sample of a declared family."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import numpy as np
import pytest
from prometheus_client.parser import text_string_to_metric_families

from rosettaserve import Model
from rosettaserve.core.call import PROTOCOL
from rosettaserve.core.dataplane import DataPlane
from rosettaserve.core.errors import InvalidInput, ServingError
from rosettaserve.core.invoker import Invoker
from rosettaserve.core.registry import ModelVersion, VersionState
from rosettaserve.core.types import InferenceRequest, Tensor, TensorSpec
from rosettaserve.observability.metrics import Metrics, Snapshot, render
from rosettaserve.observability.triton_names import TRITON_HELP, failure_reason
from tests.unit.metrics_support import Key, OneModel, samples

MS = 1_000_000  # ns


def key(name: str, **labels: str) -> Key:
    """A sample's key; the parser reads a counter's sample as name_total (OpenMetrics' name),
    while the text has Triton's name as Triton writes it (checked below)."""
    if TRITON_HELP.get(name, ("",))[0] == "counter":
        name += "_total"
    return name, tuple(sorted(labels.items()))


class Doubler(Model):
    def predict(self, inputs: dict[str, np.ndarray]) -> Any:
        if inputs["X"][0] < 0:
            raise RuntimeError("negative")
        return {"Y": inputs["X"] * 2}


class Counting(Model):
    async def predict(self, inputs: dict[str, np.ndarray]) -> AsyncIterator[dict[str, Any]]:
        for v in range(3):
            yield {"Y": np.array([[v]], np.int32)}


def served(name: str = "m") -> tuple[DataPlane, ModelVersion, Metrics]:
    mv = ModelVersion(name=name, version="1", runtime="python", state=VersionState.READY)
    mv.model, mv.invoker = Doubler(), Invoker(Doubler())
    mv.max_batch_size = 8
    mv.inputs = [TensorSpec("X", "INT32", (-1, 1))]
    mv.outputs = [TensorSpec("Y", "INT32", (-1, 1))]
    dp = DataPlane(OneModel(mv))
    dp.started = True
    metrics = Metrics()
    dp.observer = metrics
    return dp, mv, metrics


def request(rows: list[int], protocol: str, name: str = "m") -> InferenceRequest:
    x = np.array(rows, np.int32).reshape(-1, 1)
    tensor = Tensor("X", "INT32", x.shape, x)
    return InferenceRequest(name, [tensor], context={PROTOCOL: protocol})


def traffic(dp: DataPlane) -> None:
    async def body() -> None:
        await dp.infer(request([1], "oip_rest"))
        await dp.infer(request([1, 2, 3], "grps_grpc"))
        await dp.infer(request([4], "tfserving_rest"))
        with pytest.raises(ServingError):  # the model raises: BACKEND
            await dp.infer(request([-1], "oip_grpc"))
        with pytest.raises(InvalidInput):  # a batch past max_batch_size: OTHER
            await dp.infer(request(list(range(9)), "oip_rest"))

    asyncio.run(body())


def test_counts_and_durations_are_the_statistics_and_outcomes() -> None:
    dp, mv, metrics = served()
    traffic(dp)
    got = samples(render([metrics.snapshot([mv])]))
    m = {"model": "m", "version": "1"}
    stats = mv.stats
    assert got[key("nv_inference_request_success", **m)] == 3  # summed over the protocols
    assert got[key("nv_inference_count", **m)] == 5  # rows: 1 + 3 + 1
    assert got[key("nv_inference_exec_count", **m)] == 3
    assert got[key("nv_inference_request_duration_us", **m)] == stats.success.ns // 1000
    assert got[key("nv_inference_queue_duration_us", **m)] == stats.queue.ns // 1000
    for part in ("input", "infer", "output"):
        ns = getattr(stats, f"compute_{part}").ns
        assert got[key(f"nv_inference_compute_{part}_duration_us", **m)] == ns // 1000
    assert got[key("nv_inference_compute_infer_duration_us", **m)] > 0
    failure = "nv_inference_request_failure"
    assert got[key(failure, **m, reason="BACKEND")] == 1
    assert got[key(failure, **m, reason="OTHER")] == 1
    assert got[key(failure, **m, reason="REJECTED")] == 0
    assert got[key(failure, **m, reason="CANCELED")] == 0
    assert got[key("nv_inference_pending_request_count", **m)] == 0


def test_a_served_version_has_its_families_before_its_first_request() -> None:
    _, mv, metrics = served()
    got = samples(render([metrics.snapshot([mv])]))
    m = {"model": "m", "version": "1"}
    assert got[key("nv_inference_request_success", **m)] == 0
    assert got[key("nv_inference_request_failure", **m, reason="REJECTED")] == 0
    assert got[key("nv_inference_compute_output_duration_us", **m)] == 0


def test_failure_reasons() -> None:
    assert failure_reason("overloaded") == "REJECTED"
    assert failure_reason("deadline_exceeded") == "REJECTED"
    assert failure_reason("cancelled") == "CANCELED"
    assert failure_reason("internal") == "BACKEND"
    assert failure_reason("invalid_argument") == "OTHER"


def test_generations_count_as_requests_with_their_end_to_end_time() -> None:
    metrics = Metrics()
    series = metrics.generation_series(ModelVersion("llm", "1", "llm"))
    series.finished("openai", "success", prompt_tokens=3, tokens=4, start=0, end=250 * MS)
    series.finished("tgi", "overloaded", prompt_tokens=0, tokens=0, start=0, end=MS)
    series.finished("vllm", "cancelled", prompt_tokens=2, tokens=1, start=0, end=MS)
    got = samples(render([metrics.snapshot([])]))
    m = {"model": "llm", "version": "1"}
    assert got[key("nv_inference_request_success", **m)] == 1
    assert got[key("nv_inference_request_duration_us", **m)] == 250_000
    assert got[key("nv_inference_request_failure", **m, reason="REJECTED")] == 1
    assert got[key("nv_inference_request_failure", **m, reason="CANCELED")] == 1


def test_worker_snapshots_are_summed() -> None:
    dp, mv, metrics = served()
    traffic(dp)
    snap = metrics.snapshot([mv])
    got = samples(render([snap, snap]))
    m = {"model": "m", "version": "1"}
    assert got[key("nv_inference_request_success", **m)] == 6
    assert got[key("nv_inference_exec_count", **m)] == 6
    assert got[key("nv_inference_request_failure", **m, reason="BACKEND")] == 2
    assert got[key("nv_inference_request_duration_us", **m)] == 2 * mv.stats.success.ns // 1000


def whole_exposition() -> list[Snapshot]:
    """Every family the server renders: tensor traffic, an LLM's, an awkward label, two workers."""
    dp, mv, metrics = served('we"ird\\na\nme')
    asyncio.run(dp.infer(request([1], "oip_rest", mv.name)))
    series = metrics.generation_series(ModelVersion("llm", "1", "llm"))
    series.first_token(2 * MS)
    series.inter_token(5 * MS)
    series.finished("openai", "success", prompt_tokens=3, tokens=2, start=0, end=9 * MS)
    snap = metrics.snapshot([mv])
    return [snap, snap]


def test_the_parser_reads_every_line_as_a_sample_of_a_declared_family() -> None:
    text = render(whole_exposition()).decode()
    assert text.endswith("\n")
    lines = text.splitlines()
    declared = {line.split()[2] for line in lines if line.startswith("# TYPE ")}
    helped = {line.split()[2] for line in lines if line.startswith("# HELP ")}
    assert declared == helped
    sample_lines = [line for line in lines if not line.startswith("#")]
    assert all(sample_lines), "no blank lines"
    parsed = 0
    for family in text_string_to_metric_families(text):
        assert family.type != "unknown", f"{family.name} has samples but no TYPE"
        parsed += len(family.samples)
    assert parsed == len(sample_lines)  # the parser dropped or merged none of them
    names = {line.split("{")[0].split()[0] for line in sample_lines}
    assert set(TRITON_HELP) <= names  # Triton's names as written (no _total added)
    assert "rosettaserve_requests_total" in names
    assert {"vllm:time_to_first_token_seconds_bucket", "process_cpu_seconds_total"} <= names


def test_a_stream_the_client_leaves_is_counted_as_cancelled() -> None:
    dp, mv, metrics = served()
    mv.model, mv.invoker = Counting(), Invoker(Counting())

    async def body() -> None:
        done = [r async for r in dp.infer_stream(request([1], "grps_grpc"))]
        assert len(done) == 3
        stream = dp.infer_stream(request([1], "oip_grpc"))
        await anext(stream)
        await stream.aclose()  # what the transport does when the client goes away

    asyncio.run(body())
    got = samples(render([metrics.snapshot([mv])]))
    m = {"model": "m", "version": "1"}
    total = "rosettaserve_requests_total"
    assert got[key(total, **m, protocol="grps_grpc", outcome="success")] == 1
    assert got[key(total, **m, protocol="oip_grpc", outcome="cancelled")] == 1
    assert got[key("nv_inference_request_failure", **m, reason="CANCELED")] == 1
