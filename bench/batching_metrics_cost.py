"""What recording one request's metrics costs: rosettaserve's registry vs prometheus_client.

    .venv/bin/python bench/batching_metrics_cost.py [--n 200000] [--repeat 5]

Per request the server records: a request count (model, version, protocol, outcome), a latency
histogram (model, version, protocol), and queue and compute histograms (model, version).
prometheus_client is measured as usually written (``.labels(...)`` on every call) and with its
label children looked up once and cached; then one update of each kind alone. Best of
--repeat, in ns.
"""

from __future__ import annotations

import argparse
import timeit
from collections.abc import Callable
from typing import Any

from rosettaserve.core.call import Call
from rosettaserve.core.registry import ModelVersion
from rosettaserve.observability.metrics import SECONDS_BUCKETS, Metrics, render


def ours() -> Callable[[], None]:
    metrics = Metrics()
    mv = ModelVersion(name="mlp", version="1", runtime="onnx")
    call = Call(start=1_000, submitted=2_000, ran=30_000, done=80_000)

    def record() -> None:
        metrics.observe(mv, "oip_rest", "success", call, 120_000)

    return record


def prometheus(cached: bool) -> Callable[[], None]:
    from prometheus_client import CollectorRegistry, Counter, Histogram

    registry = CollectorRegistry()
    requests = Counter(
        "requests", "", ["model", "version", "protocol", "outcome"], registry=registry
    )
    latency = Histogram(
        "latency", "", ["model", "version", "protocol"], buckets=SECONDS_BUCKETS, registry=registry
    )
    queue = Histogram("queue", "", ["model", "version"], buckets=SECONDS_BUCKETS, registry=registry)
    compute = Histogram(
        "compute", "", ["model", "version"], buckets=SECONDS_BUCKETS, registry=registry
    )
    if not cached:

        def record() -> None:
            requests.labels("mlp", "1", "oip_rest", "success").inc()
            latency.labels("mlp", "1", "oip_rest").observe(0.000119)
            queue.labels("mlp", "1").observe(0.000028)
            compute.labels("mlp", "1").observe(0.00005)

        return record
    children: dict[Any, Any] = {}

    def record_cached() -> None:
        key = ("mlp", "1", "oip_rest", "success")
        found = children.get(key)
        if found is None:
            found = children[key] = (
                requests.labels(*key),
                latency.labels(*key[:3]),
                queue.labels(*key[:2]),
                compute.labels(*key[:2]),
            )
        found[0].inc()
        found[1].observe(0.000119)
        found[2].observe(0.000028)
        found[3].observe(0.00005)

    return record_cached


def single_updates() -> dict[str, Callable[[], None]]:
    """One update of each kind alone: a labelled child's inc() and observe() against the
    registry's own (a dict count and a Histogram.add)."""
    from prometheus_client import CollectorRegistry, Counter
    from prometheus_client import Histogram as PromHistogram

    from rosettaserve.observability.metrics import Histogram

    registry = CollectorRegistry()
    counter = Counter("c", "", ["m"], registry=registry).labels("a")
    histogram = PromHistogram("h", "", ["m"], buckets=SECONDS_BUCKETS, registry=registry)
    child, ours, counts = histogram.labels("a"), Histogram(), {"success": 0}

    def count() -> None:
        counts["success"] = counts.get("success", 0) + 1

    return {
        "prometheus_client Counter.inc()": counter.inc,
        "prometheus_client Histogram.observe()": lambda: child.observe(0.000119),
        "rosettaserve outcome count (dict)": count,
        "rosettaserve Histogram.add()": lambda: ours.add(119_000),
    }


def best_ns(fn: Callable[[], None], n: int, repeat: int) -> float:
    return min(timeit.repeat(fn, number=n, repeat=repeat)) / n * 1e9


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=200_000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    cases = {
        "rosettaserve Metrics.observe": ours(),
        "prometheus_client, .labels() per call": prometheus(cached=False),
        "prometheus_client, cached children": prometheus(cached=True),
    }
    print("| recorder | ns per request |\n|---|---|")
    for name, fn in cases.items():
        print(f"| {name} | {best_ns(fn, args.n, args.repeat):.0f} |")
    print("\n| one update | ns |\n|---|---|")
    for name, fn in single_updates().items():
        print(f"| {name} | {best_ns(fn, args.n, args.repeat):.0f} |")
    metrics = Metrics()
    mv = ModelVersion(name="mlp", version="1", runtime="onnx")
    metrics.observe(mv, "oip_rest", "success", Call(1, submitted=2, ran=3, done=4), 5)
    size = len(render([metrics.snapshot([mv])]))
    print(f"\n(one model's exposition: {size} bytes)")


if __name__ == "__main__":
    main()
