"""Figures derived from what a comparison collected: a case's medians over the repeats, a
server's median req/s, ratios, ONNX Runtime alone on the batching MLP, and the server's time per
request in the batching case once ONNX Runtime's share is taken out.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import rosetta
from cases import BATCHING_CONNECTIONS
from measurements import Measurement, Results, median

BATCHING_KEY = "rosettaserve-batching"  # the batching MLP's server (rosetta.batching_setup)


def median_known(values: Sequence[float]) -> float:
    known = [v for v in values if not math.isnan(v)]
    return median(known) if known else math.nan


def med_case(results: Results, key: tuple[str, str, int]) -> Measurement | None:
    runs = results.cases.get(key)
    if not runs:
        return None
    return Measurement(
        rps=median([m.rps for m in runs]),
        p50=median_known([m.p50 for m in runs]),
        p99=median_known([m.p99 for m in runs]),
        requests=sum(m.requests for m in runs),
        errors=sum(m.errors for m in runs),
    )


def rps(results: Results, key: str | None, case: str, conns: int) -> float | None:
    if key is None:
        return None
    m = med_case(results, (key, case, conns))
    return m.rps if m else None


def ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def ort_alone(results: Results) -> tuple[float, float] | None:
    """ONNX Runtime's microseconds per row at batch 1 and in a full batch, no server (medians
    of bench/ort_alone.py's repeats); their ratio is what batching gives with no server cost."""
    one, full = (results.ort_alone.get(n) for n in rosetta.BATCHING_ROWS)
    return (median(one), median(full)) if one and full else None


def server_us(results: Results, model: str) -> tuple[float, float] | None:
    """(µs per request, the server's µs per request) of a batching model: 1 / req/s, and that
    less ONNX Runtime alone's µs per row (at batch 1 for the unbatched model, in a full batch
    for the batched one). The server runs on one core, so 1 / req/s is what a request costs it;
    what ONNX Runtime spends on the request's row is the model's, the rest the server's."""
    measured = rps(results, BATCHING_KEY, model, BATCHING_CONNECTIONS)
    alone = ort_alone(results)
    if not measured or alone is None:
        return None
    per_request = 1e6 / measured
    unbatched = model == rosetta.BATCHING_MODELS[0]
    return per_request, per_request - (alone[0] if unbatched else alone[1])
