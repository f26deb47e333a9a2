"""Prometheus metrics: a small registry recorded on the hot path, rendered as text on scrape.

What every request costs is one ``observe`` call (a few dict lookups and bucket increments,
measured in bench/batching_metrics_cost.py against prometheus_client). Gauges (in flight, queued,
model state) and the batch-size histogram are read from the served versions at scrape time, so
they cost nothing per request. With worker processes, each worker's ``snapshot`` is plain data
and ``render`` sums them into one exposition.
"""

from __future__ import annotations

import os
import resource
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from rosettaserve.core.call import Call
from rosettaserve.core.registry import ModelVersion, VersionState
from rosettaserve.web.routing import HttpRequest, HttpResponse, Route

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
PREFIX = "rosettaserve_"
# 100 microseconds (a small tensor request) to a minute (an LLM generation is counted here too)
SECONDS_BUCKETS = (
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
    0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
)  # fmt: skip
_BOUNDS_NS = tuple(round(b * 1e9) for b in SECONDS_BUCKETS)
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)
# vLLM's own buckets (vllm/v1/metrics/loggers.py), so that its dashboards read ours unchanged
TTFT_BUCKETS = (
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
    10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
)  # fmt: skip
ITL_BUCKETS = (
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
    20.0, 40.0, 80.0,
)  # fmt: skip
E2E_BUCKETS = (
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0,
    240.0, 480.0, 960.0, 1920.0, 7680.0,
)  # fmt: skip
# The LLM histograms keep counts over all of these bounds (finer than any one of them): each
# vLLM histogram is rendered at its own bounds, the status page estimates percentiles from all.
LLM_BUCKETS = tuple(sorted({*SECONDS_BUCKETS, *TTFT_BUCKETS, *ITL_BUCKETS, *E2E_BUCKETS}))
_LLM_BOUNDS_NS = tuple(round(b * 1e9) for b in LLM_BUCKETS)

RequestKey = tuple[str, str, str]  # model, version, protocol
ModelKey = tuple[str, str]  # model, version
Counts = tuple[list[int], int]  # a histogram's bucket counts and sum (ns)


class Histogram:
    """Counts per bucket of ``bounds`` (not cumulative; the last is +Inf) and the sum, in
    nanoseconds: the request histograms at SECONDS_BUCKETS, the LLM ones at LLM_BUCKETS."""

    __slots__ = ("bounds", "counts", "sum")

    def __init__(self, bounds: tuple[int, ...] = _BOUNDS_NS) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)
        self.sum = 0

    def add(self, ns: int) -> None:
        self.counts[bucket(self.bounds, ns)] += 1
        self.sum += ns

    def copy(self) -> Counts:
        return list(self.counts), self.sum


def bucket(bounds: tuple[int, ...], ns: int) -> int:
    """``bisect.bisect_left(bounds, ns)``, compiled: on native ints, a request's three
    histograms cost a tenth of what bisect's Python objects cost [cost: metrics-bucket]."""
    low, high = 0, len(bounds)
    while low < high:
        middle = (low + high) // 2
        if bounds[middle] < ns:
            low = middle + 1
        else:
            high = middle
    return low


class RequestSeries:
    __slots__ = ("latency", "model", "outcomes")

    def __init__(self) -> None:
        self.outcomes: dict[str, int] = {}
        self.latency = Histogram()
        self.model: ModelSeries | None = None  # its model version's series, once looked up


class ModelSeries:
    __slots__ = ("compute", "queue")

    def __init__(self) -> None:
        self.queue = Histogram()
        self.compute = Histogram()


@dataclass
class VersionRow:
    """A served version as a scrape sees it."""

    state: str
    inflight: int
    queued: int
    batches: dict[int, int]  # executions per batch size
    llm: LlmGauges | None = None  # an LLM engine's gauges
    totals: TensorTotals | None = None  # its statistics' running totals (Triton's names)
    resident: int = 0  # bytes its load took (0: not loaded)


@dataclass
class TensorTotals:
    """A version's cumulative statistics (core/stats.py), read at scrape time: Triton's counters
    (observability/triton_names.py) are these, so a request pays nothing more for them."""

    inferences: int  # batch rows of successful requests
    executions: int  # model executions (a dynamic batch of many requests is one)
    success_ns: int  # end-to-end time of the successful requests
    queue_ns: int
    input_ns: int
    infer_ns: int
    output_ns: int
    cache: CacheTotals | None = None  # its response cache's figures (None: it has none)


@dataclass
class CacheTotals:
    """A cached version's response cache hits and misses, with their cumulative times."""

    hits: int
    hit_ns: int
    misses: int
    miss_ns: int


@dataclass
class LlmGauges:
    running: int  # sequences in the engine's batch
    waiting: int  # requests waiting to join it
    kv_tokens: int  # KV cache tokens held by the running sequences
    kv_capacity: int  # the KV budget (or max_num_seqs x max_model_len without one)


@dataclass
class LlmCounts:
    """One version's LLM figures (plain data; LLM_BUCKETS histograms)."""

    prompt_tokens: int
    generation_tokens: int
    ttft: Counts
    itl: Counts
    e2e: Counts


@dataclass
class Snapshot:
    """One process's metrics as plain data (picklable, summable)."""

    requests: dict[RequestKey, tuple[dict[str, int], Counts]]
    models: dict[ModelKey, tuple[Counts, Counts]]  # queue, compute
    versions: dict[ModelKey, VersionRow]
    process: dict[str, float] = field(default_factory=dict)
    llm: dict[ModelKey, LlmCounts] = field(default_factory=dict)


class LlmSeries:
    """One version's LLM figures, fed by the generation plane (a ``GenerationSeries``)."""

    __slots__ = ("e2e", "generation_tokens", "itl", "key", "metrics", "prompt_tokens", "ttft")

    def __init__(self, metrics: Metrics, key: ModelKey) -> None:
        self.metrics, self.key = metrics, key
        self.prompt_tokens = 0
        self.generation_tokens = 0
        self.ttft = Histogram(_LLM_BOUNDS_NS)
        self.itl = Histogram(_LLM_BOUNDS_NS)
        self.e2e = Histogram(_LLM_BOUNDS_NS)

    def first_token(self, ns: int) -> None:
        self.ttft.add(ns)

    def inter_token(self, ns: int) -> None:
        self.itl.add(ns)

    def finished(
        self, family: str, outcome: str, *, prompt_tokens: int, tokens: int, start: int, end: int
    ) -> None:
        self.prompt_tokens += prompt_tokens
        self.generation_tokens += tokens
        if outcome == "success":
            self.e2e.add(end - start)
        self.metrics.count_request((*self.key, family or "other"), outcome, end - start)

    def counts(self) -> LlmCounts:
        return LlmCounts(
            self.prompt_tokens,
            self.generation_tokens,
            self.ttft.copy(),
            self.itl.copy(),
            self.e2e.copy(),
        )


class Metrics:
    """The data plane's observer (per request: counts by outcome and three histograms), and
    the generation plane's (per LLM model version: tokens, TTFT, inter-token and e2e latency)."""

    def __init__(self) -> None:
        self._requests: dict[RequestKey, RequestSeries] = {}
        self._models: dict[ModelKey, ModelSeries] = {}
        self._llm: dict[ModelKey, LlmSeries] = {}
        self.started = time.time()

    def generation_series(self, mv: ModelVersion) -> LlmSeries:
        key = (mv.name, mv.version)
        series = self._llm.get(key)
        if series is None:
            series = self._llm[key] = LlmSeries(self, key)
        return series

    def count_request(self, key: RequestKey, outcome: str, ns: int) -> None:
        series = self._requests.get(key)
        if series is None:
            series = self._requests[key] = RequestSeries()
        series.outcomes[outcome] = series.outcomes.get(outcome, 0) + 1
        series.latency.add(ns)

    def observe(self, mv: ModelVersion, protocol: str, outcome: str, call: Call, end: int) -> None:
        key = (mv.name, mv.version, protocol or "other")
        series = self._requests.get(key)
        if series is None:
            series = self._requests[key] = RequestSeries()
        outcomes = series.outcomes
        outcomes[outcome] = outcomes.get(outcome, 0) + 1
        latency, ns = series.latency, end - call.start
        bounds = _BOUNDS_NS
        latency.counts[bucket(bounds, ns)] += 1
        latency.sum += ns
        ran = call.ran
        if ran:  # it reached the model (the histograms' adds, inlined: this is the hot path)
            model = series.model  # (not a lookup by key[:2] each time) [cost: metrics-series]
            if model is None:
                model = self._models.get(key[:2])
                if model is None:
                    model = self._models[key[:2]] = ModelSeries()
                series.model = model
            queue, ns = model.queue, max(ran - call.submitted, 0)
            queue.counts[bucket(bounds, ns)] += 1
            queue.sum += ns
            compute, ns = model.compute, max(call.done - ran, 0)
            compute.counts[bucket(bounds, ns)] += 1
            compute.sum += ns

    def snapshot(self, versions: Iterable[ModelVersion]) -> Snapshot:
        return Snapshot(
            requests={k: (dict(s.outcomes), s.latency.copy()) for k, s in self._requests.items()},
            models={k: (m.queue.copy(), m.compute.copy()) for k, m in self._models.items()},
            versions={(v.name, v.version): _row(v) for v in versions},
            process=_process(self.started),
            llm={k: s.counts() for k, s in self._llm.items()},
        )


def _row(mv: ModelVersion) -> VersionRow:
    waiting = mv.invoker.waiting if mv.invoker is not None else None
    stats = mv.stats
    batches = {size: b.compute_infer.count for size, b in stats.batches.items()}
    totals = TensorTotals(
        stats.inference_count,
        stats.execution_count,
        stats.success.ns,
        stats.queue.ns,
        stats.compute_input.ns,
        stats.compute_infer.ns,
        stats.compute_output.ns,
    )
    if mv.response_cache:
        hit, miss = stats.cache_hit, stats.cache_miss
        totals.cache = CacheTotals(hit.count, hit.ns, miss.count, miss.ns)
    row = VersionRow(mv.state.value, mv.inflight, waiting or 0, batches, llm_gauges(mv), totals)
    row.resident = mv.resident_bytes
    return row


def llm_gauges(mv: ModelVersion) -> LlmGauges | None:
    """An LLM engine's running and waiting sequences and KV cache use, as it counts them."""
    engine = getattr(mv.model, "engine", None)
    stats = getattr(engine, "stats", None)
    config = getattr(engine, "config", None)
    if stats is None or config is None:
        return None
    budget = int(getattr(config, "kv_budget_tokens", 0) or 0)
    if not budget:
        budget = int(getattr(config, "max_num_seqs", 0)) * int(getattr(config, "max_model_len", 0))
    return LlmGauges(
        int(getattr(stats, "running", 0)),
        int(getattr(stats, "waiting", 0)),
        int(getattr(stats, "kv_tokens", 0)),
        budget,
    )


def _process(started: float) -> dict[str, float]:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return {
        "cpu": usage.ru_utime + usage.ru_stime,
        "rss": _rss_bytes(),
        "start": started,
    }


def _rss_bytes() -> float:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024.0


def metrics_route(source: Callable[[], Awaitable[bytes]]) -> Route:
    """``GET /metrics``: the exposition ``source`` renders (this process's, or every worker's)."""

    async def metrics(req: HttpRequest) -> HttpResponse:
        return HttpResponse(200, await source(), CONTENT_TYPE)

    return Route("GET", "/metrics", metrics)


# -- exposition --------------------------------------------------------------------------------

HELP = {
    "requests_total": ("counter", "Inference requests that reached a model version, by outcome"),
    "request_duration_seconds": ("histogram", "Time from taking a request to its answer"),
    "queue_duration_seconds": (
        "histogram",
        "Time a request waited for the model (batcher queue or a free thread)",
    ),
    "compute_duration_seconds": ("histogram", "Model execution time (of the request's batch)"),
    "batch_size": ("histogram", "Rows per model execution"),
    "inflight_requests": ("gauge", "Requests inside a model version now (queued or running)"),
    "queued_requests": ("gauge", "Requests waiting in a model version's batcher queue now"),
    "model_state": ("gauge", "Worker processes in which the version is in this state"),
    "model_resident_bytes": (
        "gauge",
        "Memory a loaded model version holds: the process's growth while it loaded (summed "
        "over workers; 0 while unloaded)",
    ),
    "worker_processes": ("gauge", "Worker processes whose metrics are included"),
}
PROCESS_HELP = {
    "process_resident_memory_bytes": ("gauge", "Resident memory of every worker, summed", "rss"),
    "process_cpu_seconds_total": ("counter", "CPU time of every worker, summed", "cpu"),
    "process_start_time_seconds": ("gauge", "Start time of the oldest worker (unix)", "start"),
}


def render(snapshots: list[Snapshot]) -> bytes:
    """The Prometheus text exposition of one or more processes' snapshots, summed."""
    lines: list[str] = []
    families = {
        "requests_total": list(_requests_total(snapshots)),
        "request_duration_seconds": list(_latency(snapshots)),
        "queue_duration_seconds": list(_model_histogram(snapshots, 0)),
        "compute_duration_seconds": list(_model_histogram(snapshots, 1)),
        "batch_size": list(_batch_sizes(snapshots)),
        "inflight_requests": list(_gauge(snapshots, "inflight")),
        "queued_requests": list(_gauge(snapshots, "queued")),
        "model_state": list(_states(snapshots)),
        "model_resident_bytes": list(_resident(snapshots)),
        "worker_processes": [f"{PREFIX}worker_processes {len(snapshots)}"],
    }
    for name, samples in families.items():
        kind, text = HELP[name]
        lines += [f"# HELP {PREFIX}{name} {text}.", f"# TYPE {PREFIX}{name} {kind}", *samples]
    for name, (kind, text, key) in PROCESS_HELP.items():
        values = [s.process[key] for s in snapshots if key in s.process]
        value = min(values) if key == "start" else sum(values)
        lines += [f"# HELP {name} {text}.", f"# TYPE {name} {kind}", f"{name} {float(value)!r}"]
    from rosettaserve.observability import triton_names, vllm_names  # (they read its types)

    lines += triton_names.exposition(snapshots)
    lines += vllm_names.exposition(snapshots)
    return ("\n".join(lines) + "\n").encode()


def _requests_total(snapshots: list[Snapshot]) -> Iterator[str]:
    totals: dict[tuple[str, ...], int] = {}
    for snap in snapshots:
        for key, (outcomes, _) in snap.requests.items():
            for outcome, count in outcomes.items():
                totals[(*key, outcome)] = totals.get((*key, outcome), 0) + count
    for (model, version, protocol, outcome), count in sorted(totals.items()):
        labels = label_set(model=model, version=version, protocol=protocol, outcome=outcome)
        yield f"{PREFIX}requests_total{{{labels}}} {count}"


def _latency(snapshots: list[Snapshot]) -> Iterator[str]:
    merged = _merge((key, counts) for s in snapshots for key, (_, counts) in s.requests.items())
    for (model, version, protocol), (counts, total) in sorted(merged.items()):
        labels = label_set(model=model, version=version, protocol=protocol)
        yield from _histogram("request_duration_seconds", labels, counts, total)


def _model_histogram(snapshots: list[Snapshot], index: int) -> Iterator[str]:
    name = "queue_duration_seconds" if index == 0 else "compute_duration_seconds"
    merged = _merge((key, row[index]) for s in snapshots for key, row in s.models.items())
    for (model, version), (counts, total) in sorted(merged.items()):
        yield from _histogram(name, label_set(model=model, version=version), counts, total)


def _merge(rows: Iterable[tuple[Any, Counts]]) -> dict[Any, Counts]:
    merged: dict[Any, Counts] = {}
    for key, (counts, total) in rows:
        have = merged.get(key)
        if have is None:
            merged[key] = (list(counts), total)
        else:
            merged[key] = ([a + b for a, b in zip(have[0], counts, strict=True)], have[1] + total)
    return merged


def _histogram(name: str, labels: str, counts: list[int], total_ns: int) -> Iterator[str]:
    running = 0
    for bound, count in zip(SECONDS_BUCKETS, counts, strict=False):
        running += count
        yield f'{PREFIX}{name}_bucket{{{labels},le="{bound:g}"}} {running}'
    running += counts[-1]
    yield f'{PREFIX}{name}_bucket{{{labels},le="+Inf"}} {running}'
    yield f"{PREFIX}{name}_sum{{{labels}}} {total_ns / 1e9:.9g}"
    yield f"{PREFIX}{name}_count{{{labels}}} {running}"


def _batch_sizes(snapshots: list[Snapshot]) -> Iterator[str]:
    merged: dict[ModelKey, dict[int, int]] = {}
    for snap in snapshots:
        for key, row in snap.versions.items():
            sizes = merged.setdefault(key, {})
            for size, count in row.batches.items():
                sizes[size] = sizes.get(size, 0) + count
    for (model, version), sizes in sorted(merged.items()):
        labels = label_set(model=model, version=version)
        running = 0
        for bound in BATCH_BUCKETS:
            running = sum(c for s, c in sizes.items() if s <= bound)
            yield f'{PREFIX}batch_size_bucket{{{labels},le="{bound}"}} {running}'
        count = sum(sizes.values())
        yield f'{PREFIX}batch_size_bucket{{{labels},le="+Inf"}} {count}'
        yield f"{PREFIX}batch_size_sum{{{labels}}} {sum(s * c for s, c in sizes.items())}"
        yield f"{PREFIX}batch_size_count{{{labels}}} {count}"


def _gauge(snapshots: list[Snapshot], attr: str) -> Iterator[str]:
    totals: dict[ModelKey, int] = {}
    for snap in snapshots:
        for key, row in snap.versions.items():
            totals[key] = totals.get(key, 0) + getattr(row, attr)
    for (model, version), value in sorted(totals.items()):
        yield f"{PREFIX}{attr}_requests{{{label_set(model=model, version=version)}}} {value}"


def _resident(snapshots: list[Snapshot]) -> Iterator[str]:
    totals: dict[ModelKey, int] = {}
    for snap in snapshots:
        for key, row in snap.versions.items():
            totals[key] = totals.get(key, 0) + row.resident
    for (model, version), value in sorted(totals.items()):
        yield f"{PREFIX}model_resident_bytes{{{label_set(model=model, version=version)}}} {value}"


def _states(snapshots: list[Snapshot]) -> Iterator[str]:
    counts: dict[ModelKey, dict[str, int]] = {}
    for snap in snapshots:
        for key, row in snap.versions.items():
            states = counts.setdefault(key, dict.fromkeys((s.value for s in VersionState), 0))
            states[row.state] = states.get(row.state, 0) + 1
    for (model, version), states in sorted(counts.items()):
        for state, n in states.items():
            labels = label_set(model=model, version=version, state=state)
            yield f"{PREFIX}model_state{{{labels}}} {n}"


def label_set(**values: str) -> str:
    return ",".join(f'{k}="{_escape(v)}"' for k, v in values.items())


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
