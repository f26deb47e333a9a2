"""What one load-generator run measured (``Measurement``), what one start of a server cost
(``ServerRun``), everything a comparison collects (``Results``), and the small numeric helpers
they need: medians, wrk's durations in ms, nearest-rank percentiles.
"""

from __future__ import annotations

import math
import re
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field


@dataclass
class Measurement:
    rps: float
    p50: float  # ms
    p99: float  # ms
    requests: int
    errors: int
    note: str = ""


@dataclass
class ServerRun:
    """One start of one server: what it cost and how it did."""

    startup: float | None = None  # s
    idle_rss: float | None = None  # bytes
    peak_rss: float | None = None  # bytes
    version: str = ""
    failure: str = ""


@dataclass
class Results:
    runs: dict[str, list[ServerRun]] = field(default_factory=dict)
    cases: dict[tuple[str, str, int], list[Measurement]] = field(default_factory=dict)
    failures: dict[tuple[str, str, int], list[str]] = field(default_factory=dict)
    batch_size: dict[str, list[float]] = field(default_factory=dict)
    ort_alone: dict[int, list[float]] = field(default_factory=dict)  # rows -> us per row

    def add(self, key: tuple[str, str, int], m: Measurement) -> None:
        self.cases.setdefault(key, []).append(m)

    def fail(self, key: tuple[str, str, int], why: str) -> None:
        self.failures.setdefault(key, []).append(why)


def median(values: Sequence[float]) -> float:
    return float(statistics.median(values))


def to_ms(value: str) -> float:
    match = re.fullmatch(r"([\d.]+)(us|ms|s|m|h)", value.strip())
    if match is None:
        raise ValueError(f"not a duration: {value!r}")
    scale = {"us": 1e-3, "ms": 1.0, "s": 1e3, "m": 60e3, "h": 3600e3}[match.group(2)]
    return float(match.group(1)) * scale


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile of already sorted values."""
    if not sorted_values:
        return math.nan
    rank = max(1, math.ceil(q / 100 * len(sorted_values)))
    return sorted_values[rank - 1]
