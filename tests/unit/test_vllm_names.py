"""The LLM figures on /metrics under vLLM's names: each histogram at vLLM's own bounds (summed
from the finer buckets kept), tokens and successes counted, summed over worker snapshots."""

from __future__ import annotations

import re

from prometheus_client.parser import text_string_to_metric_families

from rosettaserve.core.registry import ModelVersion
from rosettaserve.observability.metrics import Metrics, render

MS = 1_000_000


def sample(text: str, name: str, **labels: str) -> float:
    for line in text.splitlines():
        found = re.fullmatch(rf"{re.escape(name)}\{{(.*)\}} (\S+)", line)
        if found and found.group(1) == ",".join(f'{k}="{v}"' for k, v in labels.items()):
            return float(found.group(2))
    raise AssertionError(f"no sample {name} {labels}")


def recorded() -> Metrics:
    metrics = Metrics()
    series = metrics.generation_series(ModelVersion("m", "1", "llm"))
    series.first_token(2 * MS)
    for gap in (5, 5, 30):
        series.inter_token(gap * MS)
    series.finished("openai", "success", prompt_tokens=3, tokens=4, start=0, end=1200 * MS)
    series.finished("tgi", "overloaded", prompt_tokens=0, tokens=0, start=0, end=MS)
    return metrics


def test_histograms_at_vllms_bounds_and_counters() -> None:
    text = render([recorded().snapshot([])]).decode()
    m = {"model_name": "m"}
    ttft = "vllm:time_to_first_token_seconds_bucket"
    assert sample(text, ttft, **m, le="0.001") == 0
    assert sample(text, ttft, **m, le="0.005") == 1
    itl = "vllm:inter_token_latency_seconds_bucket"
    assert [sample(text, itl, **m, le=le) for le in ("0.01", "0.025", "0.05", "+Inf")] == [
        2, 2, 3, 3
    ]  # fmt: skip
    assert sample(text, "vllm:inter_token_latency_seconds_sum", **m) == 0.04
    assert sample(text, "vllm:time_per_output_token_seconds_count", **m) == 3
    e2e = "vllm:e2e_request_latency_seconds_bucket"
    assert (sample(text, e2e, **m, le="1"), sample(text, e2e, **m, le="1.5")) == (0, 1)
    assert sample(text, "vllm:prompt_tokens_total", **m) == 3
    assert sample(text, "vllm:generation_tokens_total", **m) == 4
    assert sample(text, "vllm:request_success_total", **m) == 1
    total = "rosettaserve_requests_total"
    assert sample(text, total, model="m", version="1", protocol="openai", outcome="success") == 1
    assert sample(text, total, model="m", version="1", protocol="tgi", outcome="overloaded") == 1
    families = {f.name for f in text_string_to_metric_families(text)}  # a valid exposition
    assert {"vllm:time_to_first_token_seconds", "vllm:prompt_tokens"} <= families


def test_worker_snapshots_are_summed() -> None:
    snap = recorded().snapshot([])
    text = render([snap, snap]).decode()
    assert sample(text, "vllm:generation_tokens_total", model_name="m") == 8
    assert sample(text, "vllm:e2e_request_latency_seconds_count", model_name="m") == 2


def test_no_llm_no_vllm_lines() -> None:
    assert b"vllm:" not in render([Metrics().snapshot([])])
