"""The LLM figures of the metrics snapshots under vLLM's own names, labels and buckets
(``vllm:time_to_first_token_seconds`` and the rest, by ``model_name``), so that a dashboard
made for vLLM reads a rosettaserve server unchanged. Rendered with the rest of /metrics
(observability/metrics.py) and summed over versions and worker processes the same way.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

from rosettaserve.observability.metrics import (
    E2E_BUCKETS,
    ITL_BUCKETS,
    LLM_BUCKETS,
    TTFT_BUCKETS,
    Counts,
    Snapshot,
    label_set,
)

# vLLM's names and meanings (labelled by model_name), so that a vLLM dashboard reads them
VLLM_HELP = {
    "vllm:num_requests_running": ("gauge", "Number of requests in model execution batches"),
    "vllm:num_requests_waiting": ("gauge", "Number of requests waiting to be processed"),
    "vllm:kv_cache_usage_perc": ("gauge", "KV-cache usage. 1 means 100 percent usage"),
    "vllm:prompt_tokens_total": ("counter", "Number of prefill tokens processed"),
    "vllm:generation_tokens_total": ("counter", "Number of generation tokens processed"),
    "vllm:request_success_total": ("counter", "Count of successfully processed requests"),
    "vllm:time_to_first_token_seconds": (
        "histogram",
        "Histogram of time to first token in seconds",
    ),
    "vllm:inter_token_latency_seconds": (
        "histogram",
        "Histogram of inter-token latency in seconds",
    ),
    "vllm:time_per_output_token_seconds": (
        "histogram",
        "Histogram of time per output token in seconds (inter-token latency, its older name)",
    ),
    "vllm:e2e_request_latency_seconds": (
        "histogram",
        "Histogram of end to end request latency in seconds",
    ),
    # the Gateway API Inference Extension's endpoint picker reads LoRA state here: no adapters
    # (LoRA is not built), and the time of this reading as the value, as vLLM's
    "vllm:lora_requests_info": ("gauge", "Running stats on lora requests"),
}


def exposition(snapshots: list[Snapshot]) -> list[str]:
    """The vLLM families' lines (none when no LLM is served)."""
    lines: list[str] = []
    for name, samples in _families(snapshots).items():
        if samples:
            kind, text = VLLM_HELP[name]
            lines += [f"# HELP {name} {text}.", f"# TYPE {name} {kind}", *samples]
    return lines


def _families(snapshots: list[Snapshot]) -> dict[str, list[str]]:
    """The LLM figures under vLLM's names, summed over versions and worker processes."""
    gauges: dict[str, list[float]] = {}  # model -> running, waiting, kv tokens, kv capacity
    for snap in snapshots:
        for (model, _), row in snap.versions.items():
            if row.llm is not None:
                g = gauges.setdefault(model, [0.0, 0.0, 0.0, 0.0])
                g[0] += row.llm.running
                g[1] += row.llm.waiting
                g[2] += row.llm.kv_tokens
                g[3] += row.llm.kv_capacity
    counts: dict[str, list[int]] = {}  # model -> prompt, generation tokens
    hists: dict[tuple[str, int], Counts] = {}  # (model, 0 ttft / 1 itl / 2 e2e) -> counts
    for snap in snapshots:
        for (model, _), llm in snap.llm.items():
            c = counts.setdefault(model, [0, 0])
            c[0] += llm.prompt_tokens
            c[1] += llm.generation_tokens
            for i, h in enumerate((llm.ttft, llm.itl, llm.e2e)):
                hists[(model, i)] = _add_counts(hists.get((model, i)), h)
    out: dict[str, list[str]] = {name: [] for name in VLLM_HELP}
    for model, (running, waiting, kv, capacity) in sorted(gauges.items()):
        label = label_set(model_name=model)
        out["vllm:num_requests_running"].append(f"vllm:num_requests_running{{{label}}} {running:g}")
        out["vllm:num_requests_waiting"].append(f"vllm:num_requests_waiting{{{label}}} {waiting:g}")
        usage = kv / capacity if capacity else 0.0
        out["vllm:kv_cache_usage_perc"].append(f"vllm:kv_cache_usage_perc{{{label}}} {usage:.6g}")
    if gauges:
        lora = label_set(max_lora="0", running_lora_adapters="", waiting_lora_adapters="")
        now = time.time()
        out["vllm:lora_requests_info"].append(f"vllm:lora_requests_info{{{lora}}} {now:.3f}")
    for model, (prompt, generated) in sorted(counts.items()):
        label = label_set(model_name=model)
        out["vllm:prompt_tokens_total"].append(f"vllm:prompt_tokens_total{{{label}}} {prompt}")
        out["vllm:generation_tokens_total"].append(
            f"vllm:generation_tokens_total{{{label}}} {generated}"
        )
        success = sum(hists[(model, 2)][0])
        out["vllm:request_success_total"].append(f"vllm:request_success_total{{{label}}} {success}")
        for name, index, bounds in (
            ("vllm:time_to_first_token_seconds", 0, TTFT_BUCKETS),
            ("vllm:inter_token_latency_seconds", 1, ITL_BUCKETS),
            ("vllm:time_per_output_token_seconds", 1, ITL_BUCKETS),
            ("vllm:e2e_request_latency_seconds", 2, E2E_BUCKETS),
        ):
            out[name] += _llm_histogram(name, label, hists[(model, index)], bounds)
    return out


def _add_counts(have: Counts | None, more: Counts) -> Counts:
    if have is None:
        return list(more[0]), more[1]
    return [a + b for a, b in zip(have[0], more[0], strict=True)], have[1] + more[1]


def _llm_histogram(
    name: str, labels: str, counts: Counts, bounds: tuple[float, ...]
) -> Iterator[str]:
    """An LLM_BUCKETS histogram rendered at ``bounds`` (each one of LLM_BUCKETS)."""
    per_bucket, total_ns = counts
    running, i = 0, 0
    for bound in bounds:
        while i < len(LLM_BUCKETS) and LLM_BUCKETS[i] <= bound:
            running += per_bucket[i]
            i += 1
        yield f'{name}_bucket{{{labels},le="{bound:g}"}} {running}'
    count = sum(per_bucket)
    yield f'{name}_bucket{{{labels},le="+Inf"}} {count}'
    yield f"{name}_sum{{{labels}}} {total_ns / 1e9:.9g}"
    yield f"{name}_count{{{labels}}} {count}"
