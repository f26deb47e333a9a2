"""The tensor figures of the metrics snapshots under Triton's own names, types and labels
(``nv_inference_request_success`` and the rest, by ``model`` and ``version``), so that a
dashboard made for Triton reads a rosettaserve server unchanged.

Nothing here is recorded per request: every family is derived at scrape time from what the
server records anyway (observability/metrics.py), summed over worker processes:

- ``nv_inference_request_success`` and ``nv_inference_request_failure`` are the requests counted
  by outcome (``rosettaserve_requests_total``, every protocol, LLM generations included), summed
  over protocols; a failure's outcome is mapped to Triton's ``reason`` (``FAILURE_REASONS``);
- the counts and cumulative microseconds are the version's statistics (core/stats.py, the ones
  the OIP statistics extension answers), so /metrics and /v2/models/stats agree as in Triton;
  an LLM generation adds its end-to-end time to ``nv_inference_request_duration_us``;
- ``nv_inference_pending_request_count`` is the requests waiting in the version's batcher queue;
- ``nv_cache_*_per_model``: a cached version's response cache hits and misses (its statistics'
  ``cache_hit`` and ``cache_miss``), for versions whose answers are cached only.
"""

from __future__ import annotations

from rosettaserve.observability.metrics import ModelKey, Snapshot, label_set

# Triton's help texts (as its /metrics writes them); every counter is cumulative, as Triton's are
TRITON_HELP = {
    "nv_inference_request_success": (
        "counter",
        "Number of successful inference requests, all batch sizes",
    ),
    "nv_inference_request_failure": (
        "counter",
        "Number of failed inference requests, all batch sizes",
    ),
    "nv_inference_count": (
        "counter",
        "Number of inferences performed (does not include cached requests)",
    ),
    "nv_inference_exec_count": (
        "counter",
        "Number of model executions performed (does not include cached requests)",
    ),
    "nv_inference_request_duration_us": (
        "counter",
        "Cumulative inference request duration in microseconds (includes cached requests)",
    ),
    "nv_inference_queue_duration_us": (
        "counter",
        "Cumulative inference queuing duration in microseconds (includes cached requests)",
    ),
    "nv_inference_compute_input_duration_us": (
        "counter",
        "Cumulative compute input duration in microseconds (does not include cached requests)",
    ),
    "nv_inference_compute_infer_duration_us": (
        "counter",
        "Cumulative compute inference duration in microseconds (does not include cached requests)",
    ),
    "nv_inference_compute_output_duration_us": (
        "counter",
        "Cumulative inference compute output duration in microseconds "
        "(does not include cached requests)",
    ),
    "nv_inference_pending_request_count": (
        "gauge",
        "Instantaneous number of pending requests awaiting execution per-model",
    ),
}

# Triton's response cache families (lines only for versions whose answers are cached, as
# Triton's): the figures of CacheTotals, in this order; durations in microseconds
TRITON_CACHE_HELP = {
    "nv_cache_num_hits_per_model": "Number of cache hits per model",
    "nv_cache_hit_duration_per_model": "Total cache hit duration per model, in microseconds",
    "nv_cache_num_misses_per_model": "Number of cache misses per model",
    "nv_cache_miss_duration_per_model": (
        "Total cache miss (insert+lookup) duration per model, in microseconds"
    ),
}

# Triton's failure reasons, and the outcomes (error kinds, lower case) each one covers
REASONS = ("REJECTED", "CANCELED", "BACKEND", "OTHER")
FAILURE_REASONS = {
    "overloaded": "REJECTED",  # the queue limit (Triton: the queue policy rejects it)
    "deadline_exceeded": "REJECTED",  # the request's timeout (Triton: its timeout rejects it)
    "cancelled": "CANCELED",  # the client went away
    "internal": "BACKEND",  # the model raised, or returned something unusable
}  # anything else (an invalid input past the protocol's checks...): OTHER

# family -> index in the per-version row below
_ROW = (
    "nv_inference_request_success",
    "nv_inference_count",
    "nv_inference_exec_count",
    "nv_inference_request_duration_us",
    "nv_inference_queue_duration_us",
    "nv_inference_compute_input_duration_us",
    "nv_inference_compute_infer_duration_us",
    "nv_inference_compute_output_duration_us",
    "nv_inference_pending_request_count",
)

_COLUMN = {name: i for i, name in enumerate(_ROW)}


def failure_reason(outcome: str) -> str:
    return FAILURE_REASONS.get(outcome, "OTHER")


def exposition(snapshots: list[Snapshot]) -> list[str]:
    """The Triton families' lines: every served version, with zeros before its first request."""
    rows, failures = _sums(snapshots)
    lines: list[str] = []
    for name, (kind, text) in TRITON_HELP.items():
        lines += [f"# HELP {name} {text}.", f"# TYPE {name} {kind}"]
        for (model, version), row in sorted(rows.items()):
            if name == "nv_inference_request_failure":
                for reason in REASONS:
                    labels = label_set(model=model, reason=reason, version=version)
                    lines.append(f"{name}{{{labels}}} {failures.get((model, version, reason), 0)}")
                continue
            value = row[_COLUMN[name]]
            lines.append(f"{name}{{{label_set(model=model, version=version)}}} {value}")
    return lines + _cache_lines(snapshots)


def _cache_lines(snapshots: list[Snapshot]) -> list[str]:
    """The response cache families: each cached version's hits and misses, summed."""
    sums: dict[ModelKey, list[int]] = {}
    for snap in snapshots:
        for key, served in snap.versions.items():
            cache = served.totals.cache if served.totals is not None else None
            if cache is not None:
                row = sums.setdefault(key, [0, 0, 0, 0])
                figures = (cache.hits, cache.hit_ns // 1000, cache.misses, cache.miss_ns // 1000)
                for i, value in enumerate(figures):
                    row[i] += value
    lines: list[str] = []
    if not sums:
        return lines
    for i, (name, text) in enumerate(TRITON_CACHE_HELP.items()):
        lines += [f"# HELP {name} {text}.", f"# TYPE {name} counter"]
        for (model, version), row in sorted(sums.items()):
            lines.append(f"{name}{{{label_set(model=model, version=version)}}} {row[i]}")
    return lines


def _sums(
    snapshots: list[Snapshot],
) -> tuple[dict[ModelKey, list[int]], dict[tuple[str, str, str], int]]:
    """Per version, the _ROW figures (durations still in ns), and failures per reason."""
    rows: dict[ModelKey, list[int]] = {}
    failures: dict[tuple[str, str, str], int] = {}

    def row(key: ModelKey) -> list[int]:
        found = rows.get(key)
        if found is None:
            found = rows[key] = [0] * len(_ROW)
        return found

    for snap in snapshots:
        for key, served in snap.versions.items():
            r = row(key)
            r[8] += served.queued
            t = served.totals
            if t is not None:
                figures = (t.inferences, t.executions, t.success_ns, t.queue_ns)
                for i, value in enumerate((*figures, t.input_ns, t.infer_ns, t.output_ns), 1):
                    r[i] += value
        for (model, version, _), (outcomes, _) in snap.requests.items():
            r = row((model, version))
            for outcome, count in outcomes.items():
                if outcome == "success":
                    r[0] += count
                else:
                    reason = (model, version, failure_reason(outcome))
                    failures[reason] = failures.get(reason, 0) + count
        for key, llm in snap.llm.items():
            row(key)[3] += llm.e2e[1]  # the generations' end-to-end time (successes only)
    for r in rows.values():
        for i in range(3, 8):
            r[i] //= 1000  # ns -> us
    return rows, failures
