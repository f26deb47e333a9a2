"""The histograms' bucket search (observability/metrics.py ``bucket``) is bisect_left's."""

from __future__ import annotations

import bisect
import random

from rosettaserve.observability.metrics import _BOUNDS_NS, bucket


def test_bucket_is_bisect_left_at_and_around_every_bound() -> None:
    values = [0, -1, 2**62, *(b + d for b in _BOUNDS_NS for d in (-1, 0, 1))]
    rng = random.Random(7)
    values += [rng.randrange(0, 100 * 10**9) for _ in range(2000)]
    for ns in values:
        assert bucket(_BOUNDS_NS, ns) == bisect.bisect_left(_BOUNDS_NS, ns), ns


def test_bucket_of_short_and_empty_bounds() -> None:
    assert bucket((), 5) == 0
    assert bucket((10,), 5) == 0
    assert bucket((10,), 10) == 0
    assert bucket((10,), 11) == 1
