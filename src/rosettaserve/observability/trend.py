"""grps's monitor series (``/grps/v1/monitor/series?name=...``), from the counters of /metrics.

grps keeps each metric as 30 daily, 24 hourly, 60 per-minute and 60 per-second values (174
points, oldest first) and the latency CDF of the last second. Here a sampler reads the summed
snapshots (the same ones /metrics renders) once a second and keeps the same windows; a minute's
(hour's, day's) value is the mean of its seconds' (minutes', hours'). The sampler starts at the
first monitor request, so a trend begins then; it costs one snapshot a second after that.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from rosettaserve.observability.metrics import SECONDS_BUCKETS, Snapshot
from rosettaserve.observability.status_doc import quantile

log = logging.getLogger("rosettaserve.metrics")

NAMES = ("*qps", "*fail_rate(%)", "*latency_avg(ms)", "*latency_cdf(ms)", "*cpu_usage(%)",
         "*mem_usage(%)")  # fmt: skip
TREND_NAMES = tuple(n for n in NAMES if n != "*latency_cdf(ms)")
WINDOWS = (30, 24, 60, 60)  # days, hours, minutes, seconds: grps's 174 points
# grps's CDF x-axis: 10..90, 91..99, then 100 for p99.9 and 101 for p99.99
CDF_POINTS = [(float(p), p / 100) for p in range(10, 91, 10)]
CDF_POINTS += [(float(p), p / 100) for p in range(91, 100)] + [(100.0, 0.999), (101.0, 0.9999)]
Source = Callable[[], Awaitable[list[Snapshot]]]


@dataclass
class Totals:
    """Server-wide cumulative counters at one instant."""

    at: float
    requests: int = 0
    failed: int = 0
    latency_ns: int = 0
    buckets: list[int] = field(default_factory=lambda: [0] * (len(SECONDS_BUCKETS) + 1))
    cpu: float = 0.0
    rss: float = 0.0


def totals(snapshots: list[Snapshot], at: float) -> Totals:
    t = Totals(at)
    for snap in snapshots:
        for outcomes, (buckets, total_ns) in snap.requests.values():
            count = sum(outcomes.values())
            t.requests += count
            t.failed += count - outcomes.get("success", 0)
            t.latency_ns += total_ns
            t.buckets = [a + b for a, b in zip(t.buckets, buckets, strict=True)]
        t.cpu += snap.process.get("cpu", 0.0)
        t.rss += snap.process.get("rss", 0.0)
    return t


def rates(before: Totals, now: Totals) -> dict[str, float]:
    """The per-second values of the trend metrics between two samples."""
    dt = max(now.at - before.at, 1e-6)
    n = now.requests - before.requests
    memory = _physical_memory()
    return {
        "*qps": n / dt,
        "*fail_rate(%)": 100.0 * (now.failed - before.failed) / n if n else 0.0,
        "*latency_avg(ms)": (now.latency_ns - before.latency_ns) / n / 1e6 if n else 0.0,
        "*cpu_usage(%)": 100.0 * (now.cpu - before.cpu) / dt,
        "*mem_usage(%)": 100.0 * now.rss / memory if memory else 0.0,
    }


def _physical_memory() -> float:
    try:
        return float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (OSError, ValueError):
        return 0.0


def _mean(rows: list[dict[str, float]]) -> dict[str, float]:
    return {name: sum(r[name] for r in rows) / len(rows) for name in TREND_NAMES}


class Trend:
    def __init__(self, source: Source) -> None:
        self._source = source
        self._windows: list[deque[dict[str, float]]] = [deque(maxlen=n) for n in WINDOWS]
        self._rollup: list[list[dict[str, float]]] = [[], [], []]  # seconds->min->hour->day
        self._last: Totals | None = None
        self._cdf: list[int] = [0] * (len(SECONDS_BUCKETS) + 1)
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    async def _run(self) -> None:
        while True:
            try:
                self.add(totals(await self._source(), time.time()))
            except Exception:
                log.exception("the grps monitor could not sample the metrics")
            await asyncio.sleep(1.0)

    def add(self, now: Totals) -> None:
        before, self._last = self._last, now
        if before is None:
            return
        self._cdf = [a - b for a, b in zip(now.buckets, before.buckets, strict=True)]
        row = rates(before, now)
        self._windows[3].append(row)
        for level in (2, 1, 0):  # a full minute rolls into an hour, a full hour into a day
            pending = self._rollup[level]
            pending.append(row)
            if len(pending) < (24 if level == 0 else 60):
                break
            row = _mean(pending)
            pending.clear()
            self._windows[level].append(row)

    def series(self, name: str) -> dict[str, Any] | None:
        """grps's series JSON for ``name``; None for a name it does not know."""
        if name == "*latency_cdf(ms)":
            points = []
            for x, q in CDF_POINTS:
                value = quantile(q, self._cdf)
                points.append([x, round((value or 0.0) * 1e3, 2)])
            return {"label": "cdf", "data": points}
        if name not in TREND_NAMES:
            return None
        values: list[float] = []
        for window, size in zip(self._windows, WINDOWS, strict=True):
            kept = [row[name] for row in window]
            values += [0.0] * (size - len(kept)) + kept
        return {"label": "trend", "data": [[i, round(v, 2)] for i, v in enumerate(values)]}
