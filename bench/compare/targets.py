"""The targets: rosettaserve's ratios to the other servers of the same run (the best MLServer
configuration where there are several), the batching case's server time per request against
ONNX Runtime alone, batched against unbatched on a shared core, startup and memory; each a
``Target`` that says pass or by how much it missed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import rosetta
from cases import BATCHING_CONNECTIONS, CONTENDED_KEY
from figures import BATCHING_KEY, ort_alone, ratio, rps, server_us
from measurements import Results, median
from spec import (
    GRPC_RAW_1MIB,
    GRPC_SMALL,
    GRPC_SMALL_TLS,
    REST_BINARY_1MIB,
    REST_JSON_1MIB,
    REST_SMALL,
    REST_SMALL_TLS,
    ServerSpec,
)
from tables import TLS_TITLES, contended_gain


@dataclass
class Target:
    what: str
    value: float | None  # measured ratio or value
    goal: float
    unit: str  # "x" for a ratio, else the value's unit
    at_most: bool = False  # the goal is an upper bound
    missing: str = ""
    note: str = ""  # what bounds the value on this machine, shown after the result

    def cells(self) -> list[str]:
        what, shown, result = self._cells()
        return [what, shown, f"{result}; {self.note}" if self.note else result]

    def _cells(self) -> list[str]:
        if self.value is None:
            return [self.what, "—", f"n/a ({self.missing})"]
        shown = (
            f"{self.value:.2f}{self.unit}" if self.unit == "x" else f"{self.value:.2f} {self.unit}"
        )
        ok = self.value < self.goal if self.at_most else self.value >= self.goal
        if ok:
            return [self.what, shown, "pass"]
        if self.at_most:
            over = (self.value / self.goal - 1) * 100
            by = f"{self.value - self.goal:.2f} {self.unit} ({over:.0f}% over the limit)"
        else:
            short = (1 - self.value / self.goal) * 100
            by = f"{short:.0f}% ({self.value / self.goal:.2f} of the target)"
        return [self.what, shown, f"**MISS** by {by}"]


def best_of(
    results: Results, keys: Sequence[str], case: str, conns: int
) -> tuple[str | None, float | None]:
    """The key with the highest median req/s in a case (the peer to beat)."""
    scored = [(v, k) for k in keys if (v := rps(results, k, case, conns)) is not None]
    if not scored:
        return None, None
    value, key = max(scored)
    return key, value


def targets(
    results: Results, specs: Sequence[ServerSpec], body_sizes: dict[str, int]
) -> list[Target]:
    mlservers = [s.key for s in specs if s.key.startswith("mlserver") and not s.ceiling]
    rest_ceiling = [s.key for s in specs if s.ceiling and REST_SMALL in s.cases]
    grpc_ceiling = [s.key for s in specs if s.ceiling and GRPC_SMALL in s.cases]
    me = "rosettaserve"
    out: list[Target] = []

    def versus(
        what: str, case: str, conns: int, keys: list[str], goal: float, *, who: str = me
    ) -> Target:
        _, other = best_of(results, keys, case, conns)
        value = ratio(rps(results, who, case, conns), other)
        missing = "not measured" if other is None else "rosettaserve not measured"
        return Target(what, value, goal, "x", missing=missing)

    mls = "MLServer"
    out.append(versus(f"REST small, 16 conns: >= 6x {mls}", REST_SMALL, 16, mlservers, 6))
    out.append(
        versus("REST small, 16 conns: >= 80% of bare uvicorn", REST_SMALL, 16, rest_ceiling, 0.8)
    )
    out.append(versus(f"gRPC small, 16 conns: >= 1.6x {mls}", GRPC_SMALL, 16, mlservers, 1.6))
    out.append(
        versus("gRPC small, 16 conns: >= 80% of bare grpcio", GRPC_SMALL, 16, grpc_ceiling, 0.8)
    )
    ceilings = {REST_SMALL_TLS: "uvicorn with --ssl-*", GRPC_SMALL_TLS: "grpc.aio with TLS"}
    for case, ceiling_name in ceilings.items():
        keys = [s.key for s in specs if s.ceiling and case in s.cases]
        what = f"{TLS_TITLES[case][0]}, 16 conns: >= 80% of {ceiling_name}"
        out.append(versus(what, case, 16, keys, 0.8, who=f"{me}_tls"))
    out.append(versus(f"REST JSON 1 MiB: >= 5x {mls}", REST_JSON_1MIB, 4, mlservers, 5))
    binary = rps(results, me, REST_BINARY_1MIB, 4)
    size = body_sizes.get(f"{me}/{REST_BINARY_1MIB}")
    out.append(
        Target(
            "REST binary 1 MiB: >= 1 GB/s of request bytes",
            binary * size / 1e9 if binary and size else None,
            1.0,
            "GB/s",
            missing="not measured",
        )
    )
    out.append(versus(f"gRPC raw 1 MiB: >= 3x {mls}", GRPC_RAW_1MIB, 4, mlservers, 3))
    out.append(batching_target(results))
    if CONTENDED_KEY in results.runs:
        out.append(
            Target(
                "dynamic batching with a busy loop on the server's core: batched >= unbatched",
                contended_gain(results),
                1.0,
                "x",
                missing="not measured",
            )
        )
    out += footprint_targets(results)
    return out


BATCHING_GOAL_US = 30.0  # issue 29: the server's time per batched request


def batching_target(results: Results) -> Target:
    """The server's µs per batched request (1 / req/s less ONNX Runtime alone's µs per row in a
    full batch), with ONNX Runtime alone and the batched/unbatched ratio beside it."""
    batched, unbatched = rosetta.BATCHING_MODELS[1], rosetta.BATCHING_MODELS[0]
    found = server_us(results, batched)
    alone = ort_alone(results)
    full = rosetta.BATCHING_ROWS[1]
    note = ""
    if alone is not None:
        note = (
            f"ONNX Runtime alone: {alone[0]:.1f} us per row at batch {rosetta.BATCHING_ROWS[0]}, "
            f"{alone[1]:.1f} us in a batch of {full} ({alone[0] / alone[1]:.2f}x)"
        )
    gain = ratio(
        rps(results, BATCHING_KEY, batched, BATCHING_CONNECTIONS),
        rps(results, BATCHING_KEY, unbatched, BATCHING_CONNECTIONS),
    )
    if gain is not None:
        note += f"{'; ' if note else ''}batched {gain:.2f}x unbatched"
    return Target(
        f"dynamic batching: server time per batched request (1 / req/s - ONNX Runtime alone's "
        f"time per row in a batch of {full}) <= {BATCHING_GOAL_US:.0f} us",
        found[1] if found else None,
        BATCHING_GOAL_US,
        "us",
        at_most=True,
        missing="not measured" if alone is not None else "bench/ort_alone.py not measured",
        note=note,
    )


def footprint_targets(results: Results) -> list[Target]:
    out: list[Target] = []
    startups = [
        r.startup for r in results.runs.get("rosettaserve-examples", []) if r.startup is not None
    ]
    out.append(
        Target(
            "startup to ready, tensor examples: < 1.5 s",
            median(startups) if startups else None,
            1.5,
            "s",
            at_most=True,
            missing="not measured",
        )
    )
    idle = [r.idle_rss for r in results.runs.get("rosettaserve", []) if r.idle_rss is not None]
    out.append(
        Target(
            "idle RSS (identity server): < 150 MB",
            median(idle) / 1e6 if idle else None,
            150,
            "MB",
            at_most=True,
            missing="not measured",
        )
    )
    return out
