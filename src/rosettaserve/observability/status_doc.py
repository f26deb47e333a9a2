"""The status document: what the status page and grps's monitor show, as one JSON object.

Every number comes from the snapshots ``/metrics`` renders (``observability.metrics``), summed
over the worker processes the same way; nothing here counts requests itself. What a snapshot
does not carry (a version's failure reason, its load time, an LLM engine's live gauges) is read
from this process's own served versions. Percentiles are estimated from the histogram buckets,
as Prometheus's ``histogram_quantile`` does: linear within the bucket holding the rank.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from rosettaserve.core.registry import ModelVersion
from rosettaserve.observability.metrics import (
    LLM_BUCKETS,
    SECONDS_BUCKETS,
    Counts,
    LlmCounts,
    ModelKey,
    Snapshot,
    VersionRow,
)

QUANTILES = (0.5, 0.9, 0.99)
PERCENTILE_METHOD = (
    "estimated from the histogram buckets of /metrics (linear within the bucket holding the "
    "rank, as Prometheus's histogram_quantile); a rank in the last bucket shows its lower bound"
)
# What the engine or the data plane does not measure today, shown as such on the page.
NOT_MEASURED = (
    "LLM queue time (waiting to join the engine's batch) apart from the time to first token",
    "Latency maximum: histograms keep bucket counts, not the largest value",
)
WORKERS_NOTE = (
    "With several worker processes the counters are summed over them; LLM engine figures, load "
    "times and failure reasons are those of the worker that answered"
)


@dataclass(frozen=True)
class ServerFacts:
    """What the page says about the server itself."""

    name: str
    version: str
    role: str
    workers: int
    endpoints: dict[str, str]  # "http", "grpc", "metrics" -> where they answer
    protocols: list[dict[str, str]] = field(default_factory=list)  # name, endpoint, path


@dataclass
class _Model:
    """One version's counters, summed over the snapshots."""

    outcomes: dict[str, int] = field(default_factory=dict)
    by_protocol: dict[str, int] = field(default_factory=dict)
    latency: Counts | None = None
    queue: Counts | None = None
    compute: Counts | None = None
    row: VersionRow | None = None
    llm: LlmCounts | None = None


def document(
    snapshots: list[Snapshot], versions: Iterable[ModelVersion], facts: ServerFacts
) -> dict[str, Any]:
    merged = _merge(snapshots)
    local = {(v.name, v.version): v for v in versions}
    keys = sorted(set(merged) | set(local), key=lambda k: (k[0], _version_order(k[1])))
    process = [s.process for s in snapshots]
    started = min((p["start"] for p in process if "start" in p), default=time.time())
    return {
        "server": {
            "name": facts.name,
            "version": facts.version,
            "role": facts.role,
            "workers": facts.workers,
            "processes_reporting": len(snapshots),
            "started": started,
            "uptime_s": round(time.time() - started, 3),
            "endpoints": facts.endpoints,
            "protocols": facts.protocols,
            "cpu_seconds": round(sum(p.get("cpu", 0.0) for p in process), 3),
            "rss_bytes": int(sum(p.get("rss", 0.0) for p in process)),
        },
        "time": time.time(),
        "buckets_s": list(SECONDS_BUCKETS),
        "percentile_method": PERCENTILE_METHOD,
        "not_measured": [*NOT_MEASURED, *([WORKERS_NOTE] if facts.workers > 1 else [])],
        "models": [_model_doc(k, merged.get(k, _Model()), local.get(k)) for k in keys],
    }


def _version_order(version: str) -> tuple[int, str]:
    return (int(version), "") if version.isdigit() else (1 << 62, version)


def _merge(snapshots: list[Snapshot]) -> dict[ModelKey, _Model]:
    models: dict[ModelKey, _Model] = {}
    for snap in snapshots:
        for (name, version, protocol), (outcomes, latency) in snap.requests.items():
            m = models.setdefault((name, version), _Model())
            for outcome, n in outcomes.items():
                m.outcomes[outcome] = m.outcomes.get(outcome, 0) + n
                m.by_protocol[protocol] = m.by_protocol.get(protocol, 0) + n
            m.latency = _add(m.latency, latency)
        for key, (queue, compute) in snap.models.items():
            m = models.setdefault(key, _Model())
            m.queue, m.compute = _add(m.queue, queue), _add(m.compute, compute)
        for key, row in snap.versions.items():
            m = models.setdefault(key, _Model())
            m.row = row if m.row is None else _add_rows(m.row, row)
        for key, llm in snap.llm.items():
            m = models.setdefault(key, _Model())
            m.llm = llm if m.llm is None else _add_llm(m.llm, llm)
    return models


def _add_llm(a: LlmCounts, b: LlmCounts) -> LlmCounts:
    return LlmCounts(
        a.prompt_tokens + b.prompt_tokens,
        a.generation_tokens + b.generation_tokens,
        _add(a.ttft, b.ttft),
        _add(a.itl, b.itl),
        _add(a.e2e, b.e2e),
    )


def _add(have: Counts | None, more: Counts) -> Counts:
    if have is None:
        return list(more[0]), more[1]
    return [a + b for a, b in zip(have[0], more[0], strict=True)], have[1] + more[1]


def _add_rows(a: VersionRow, b: VersionRow) -> VersionRow:
    batches = dict(a.batches)
    for size, n in b.batches.items():
        batches[size] = batches.get(size, 0) + n
    state = a.state if a.state == b.state else f"{a.state}/{b.state}"
    row = VersionRow(state, a.inflight + b.inflight, a.queued + b.queued, batches)
    row.resident = a.resident + b.resident
    return row


def _model_doc(key: ModelKey, m: _Model, mv: ModelVersion | None) -> dict[str, Any]:
    row = m.row
    batches = row.batches if row is not None else {}
    executions = sum(batches.values())
    doc: dict[str, Any] = {
        "name": key[0],
        "version": key[1],
        "state": row.state if row is not None else (mv.state.value if mv else "UNKNOWN"),
        "reason": mv.reason if mv is not None else "",
        "runtime": mv.runtime if mv is not None else "",
        "load_seconds": round(mv.load_seconds, 3) if mv is not None else None,
        "resident_bytes": row.resident if row is not None else 0,  # measured at its load
        "max_batch_size": mv.max_batch_size if mv is not None else 0,
        "dynamic_batching": bool(mv is not None and mv.dynamic_batching is not None),
        "requests": dict(sorted(m.outcomes.items())),
        "requests_total": sum(m.outcomes.values()),
        "by_protocol": dict(sorted(m.by_protocol.items())),
        "latency": histogram_doc(m.latency),
        "queue": histogram_doc(m.queue),
        "compute": histogram_doc(m.compute),
        "inflight": row.inflight if row is not None else 0,
        "queued": row.queued if row is not None else 0,
        "executions": executions,
        "batch_sizes": {str(size): n for size, n in sorted(batches.items())},
        "mean_batch_size": (
            round(sum(s * n for s, n in batches.items()) / executions, 3) if executions else None
        ),
        "llm": _llm(m.llm, llm_doc(mv) if mv is not None else None),
    }
    return doc


def _llm(counts: LlmCounts | None, engine: dict[str, Any] | None) -> dict[str, Any] | None:
    """An LLM version's figures: the engine's gauges and the generation plane's timings."""
    if counts is None:
        return engine
    return {
        **(engine or {}),
        "prompt_tokens": counts.prompt_tokens,
        "generation_tokens": counts.generation_tokens,
        "ttft": histogram_doc(counts.ttft, LLM_BUCKETS),
        "itl": histogram_doc(counts.itl, LLM_BUCKETS),
        "e2e": histogram_doc(counts.e2e, LLM_BUCKETS),
    }


def histogram_doc(
    counts: Counts | None, bounds: tuple[float, ...] = SECONDS_BUCKETS
) -> dict[str, Any]:
    """Count, mean and the percentiles of one histogram, in milliseconds, with its buckets."""
    if counts is None:
        counts = ([0] * (len(bounds) + 1), 0)
    buckets, total_ns = counts
    n = sum(buckets)
    doc: dict[str, Any] = {
        "count": n,
        "sum_s": round(total_ns / 1e9, 9),
        "mean_ms": round(total_ns / n / 1e6, 4) if n else None,
        "buckets": list(buckets),
    }
    for q in QUANTILES:
        value = quantile(q, buckets, bounds)
        doc[f"p{round(q * 100)}_ms"] = None if value is None else round(value * 1e3, 4)
    return doc


def quantile(
    q: float, buckets: list[int], bounds: tuple[float, ...] = SECONDS_BUCKETS
) -> float | None:
    """The ``q`` quantile (seconds) of per-bucket counts over ``bounds`` (+Inf last)."""
    total = sum(buckets)
    if total == 0:
        return None
    rank = q * total
    running = 0
    for i, count in enumerate(buckets):
        if count and running + count >= rank:
            if i >= len(bounds):  # the +Inf bucket: its lower bound is all we know
                return bounds[-1]
            lower = bounds[i - 1] if i > 0 else 0.0
            upper = bounds[i]
            return lower + (upper - lower) * (rank - running) / count
        running += count
    return bounds[-1]


def llm_doc(mv: ModelVersion) -> dict[str, Any] | None:
    """An LLM version's engine counters and gauges, as the engine keeps them (this process)."""
    engine = getattr(mv.model, "engine", None)
    stats = getattr(engine, "stats", None)
    if stats is None:
        return None
    config = getattr(engine, "config", None)
    return {
        "tokens_generated": stats.tokens,
        "running": stats.running,
        "waiting": stats.waiting,
        "kv_tokens": stats.kv_tokens,
        "kv_budget_tokens": getattr(config, "kv_budget_tokens", 0) or None,
        "max_num_seqs": getattr(config, "max_num_seqs", None),
        "prefills": stats.prefills,
        "prefill_tokens": getattr(stats, "prefill_tokens", None),  # (computed, not cached)
        "prefix_hit_tokens": getattr(stats, "prefix_hit_tokens", None),  # taken from the cache
        "decode_steps": stats.decode_steps,
        "peak_batch": stats.peak_batch,
        "preempted": stats.preempted,
        "cancelled": stats.cancelled,
    }
