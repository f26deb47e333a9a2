"""The status document's arithmetic: percentiles from histogram buckets, sums over worker
snapshots, and grps's trend windows (seconds roll into minutes)."""

from __future__ import annotations

import pytest

from rosettaserve.observability.metrics import SECONDS_BUCKETS, Snapshot, VersionRow
from rosettaserve.observability.status_doc import ServerFacts, document, quantile
from rosettaserve.observability.trend import Totals, Trend

EMPTY = [0] * (len(SECONDS_BUCKETS) + 1)


def buckets(**at: int) -> list[int]:
    """Counts per bucket, by the bucket's upper bound in ms: buckets(b1=3) is 3 in (0.5, 1] ms."""
    counts = list(EMPTY)
    for name, n in at.items():
        counts[SECONDS_BUCKETS.index(float(name[1:].replace("_", ".")) / 1e3)] += n
    return counts


def test_quantile_interpolates_within_the_bucket_holding_the_rank() -> None:
    counts = buckets(b1=50, b2_5=50)  # 50 in (0.5, 1] ms, 50 in (1, 2.5] ms
    assert quantile(0.5, counts) == pytest.approx(0.001)
    assert quantile(0.25, counts) == pytest.approx(0.00075)
    assert quantile(0.99, counts) == pytest.approx(0.001 + 0.0015 * 49 / 50)


def test_quantile_of_nothing_is_none_and_of_the_last_bucket_its_lower_bound() -> None:
    assert quantile(0.5, list(EMPTY)) is None
    counts = list(EMPTY)
    counts[-1] = 4  # all slower than the largest bound
    assert quantile(0.5, counts) == SECONDS_BUCKETS[-1]


def snapshot(success: int, failed: int, state: str, batches: dict[int, int]) -> Snapshot:
    latency = (buckets(b1=success + failed), (success + failed) * 1_000_000)
    outcomes = {"success": success, "internal": failed}
    return Snapshot(
        requests={("m", "1", "oip_rest"): (outcomes, latency)},
        models={("m", "1"): (latency, latency)},
        versions={("m", "1"): VersionRow(state, 1, 2, batches)},
        process={"cpu": 1.0, "rss": 10.0, "start": 5.0},
    )


def test_document_sums_the_snapshots_of_every_worker() -> None:
    facts = ServerFacts("rosettaserve", "0", "mixed", 2, {"http": "h", "grpc": "g"})
    doc = document(
        [snapshot(3, 1, "READY", {1: 2, 4: 1}), snapshot(5, 0, "READY", {4: 1})], [], facts
    )
    (model,) = doc["models"]
    assert model["requests"] == {"internal": 1, "success": 8}
    assert model["requests_total"] == model["latency"]["count"] == 9
    assert model["latency"]["mean_ms"] == pytest.approx(1.0)
    assert (model["inflight"], model["queued"]) == (2, 4)
    assert model["batch_sizes"] == {"1": 2, "4": 2}
    assert model["mean_batch_size"] == pytest.approx(10 / 4)
    assert doc["server"]["processes_reporting"] == 2
    assert doc["server"]["rss_bytes"] == 20


def test_trend_rolls_sixty_seconds_into_a_minute() -> None:
    async def nothing() -> list[Snapshot]:
        return []

    trend = Trend(nothing)
    for second in range(121):  # 120 intervals: 2 minutes, 10 requests a second
        trend.add(Totals(float(second), requests=10 * second, latency_ns=10 * second * 2_000_000))
    series = trend.series("*qps")
    assert series is not None
    qps = [v for _, v in series["data"]]
    assert len(qps) == 174
    assert qps[-60:] == [10.0] * 60  # the last 60 seconds
    assert qps[54:114][-2:] == [10.0, 10.0]  # two full minutes
    assert qps[54:112] == [0.0] * 58
    assert trend.series("*latency_avg(ms)") == {
        "label": "trend",
        "data": [[i, 2.0 if i >= 112 else 0.0] for i in range(174)],
    }
    assert trend.series("nope") is None
