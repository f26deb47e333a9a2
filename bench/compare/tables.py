"""The report's tables: one per case (medians over the repeats, or why a server has no number),
the large and medium tensors, the dynamic batching case with ONNX Runtime alone beside it, and
startup and memory; with the cell helpers they share.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import rosetta
from cases import BATCHING_CONNECTIONS, CONTENDED_KEY
from figures import med_case, ort_alone, ratio, rps, server_us
from measurements import Results, median
from spec import (
    GRPC_RAW_1MIB,
    GRPC_SMALL_TLS,
    REST_BINARY_1MIB,
    REST_BYTES,
    REST_JSON_1MIB,
    REST_JSON_64X1024,
    REST_SMALL_TLS,
    ServerSpec,
)

# rows of the report for the servers rosetta.py starts besides the identity one
EXAMPLES_VIEW = ServerSpec(
    name="rosettaserve (tensor examples)", key="rosettaserve-examples", argv=(), cases=frozenset()
)
BATCHING_VIEW = ServerSpec(
    name="rosettaserve (batching MLP)",
    key="rosettaserve-batching",
    argv=(),
    cases=frozenset(rosetta.BATCHING_MODELS),
)
CONTENDED_VIEW = ServerSpec(
    name="rosettaserve (batching MLP), contended",
    key=CONTENDED_KEY,
    argv=(),
    cases=frozenset(rosetta.BATCHING_MODELS),
)


def fmt(value: float | None, digits: int = 0) -> str:
    if value is None or math.isnan(value):
        return "—"
    return f"{value:,.{digits}f}"


TLS_TITLES = {
    REST_SMALL_TLS: (
        "REST small over TLS",
        "(a) over HTTPS, one self-signed ECDSA P-256 certificate",
    ),
    GRPC_SMALL_TLS: ("gRPC small over TLS", "(b) over TLS (ALPN h2), the same certificate"),
}


def label(spec: ServerSpec) -> str:
    return f"{spec.name} (ceiling)" if spec.ceiling else spec.name


def case_cells(results: Results, spec: ServerSpec, case: str, conns: int) -> list[str]:
    """req/s, p50, p99, req/s of each run, errors; or why there is no number."""
    key = (spec.key, case, conns)
    m = med_case(results, key)
    if m is None:
        why = "not served" if case not in spec.cases else "failed"
        starts = [r.failure for r in results.runs.get(spec.key, []) if r.failure]
        if starts and case in spec.cases:
            why = "server failed: " + starts[-1][:80]
        if key in results.failures:
            why = "failed: " + results.failures[key][-1].split(": ", 1)[-1][:80]
        return [why, "", "", "", ""]
    each = ", ".join(f"{r.rps:.0f}" for r in results.cases[key])
    errors = f"**{m.errors}**" if m.errors else "0"
    if any(r.requests == 0 for r in results.cases[key]):
        each += " (a run with no request completed)"
    return [fmt(m.rps), fmt(m.p50, 2), fmt(m.p99, 2), each, errors]


def shown(specs: Sequence[ServerSpec], case: str) -> list[ServerSpec]:
    """The servers of a case's table: those serving it, and every non-ceiling (as "not served")
    but the TLS servers, which serve the TLS cases only."""
    return [s for s in specs if case in s.cases or not (s.ceiling or s.tls)]


def row(cells: Sequence[str]) -> str:
    return "| " + " | ".join(c.replace("|", "\\|").replace("\n", " ") for c in cells) + " |"


def small_table(results: Results, specs: Sequence[ServerSpec], case: str) -> list[str]:
    lines = [
        row(["server", "conns", "req/s", "p50 ms", "p99 ms", "req/s each run", "errors"]),
        row(["---", "---:", "---:", "---:", "---:", "---", "---:"]),
    ]
    for conns in (1, 16):
        for spec in shown(specs, case):
            lines.append(row([label(spec), str(conns), *case_cells(results, spec, case, conns)]))
    return lines


ENCODINGS = {
    REST_JSON_1MIB: "REST JSON",
    REST_BINARY_1MIB: "REST binary",
    GRPC_RAW_1MIB: "gRPC raw",
    REST_JSON_64X1024: "REST JSON, FP32 [64,1024]",
    REST_BYTES: "REST JSON, BYTES [1,128]",
}
TENSOR_CONNECTIONS = 4  # the large and medium tensor cases (cases.RUNS)


def tensor_table(
    results: Results, specs: Sequence[ServerSpec], body_sizes: dict[str, int], cases: list[str]
) -> list[str]:
    """One row per case and server: req/s, request MB/s (req/s x the body's bytes), latencies."""
    head = ["server", "encoding", "req/s", "request MB/s", "p50 ms", "p99 ms", "req/s each run"]
    lines = [
        row([*head, "errors"]),
        row(["---", "---", "---:", "---:", "---:", "---:", "---", "---:"]),
    ]
    conns = TENSOR_CONNECTIONS
    for case in cases:
        for spec in shown(specs, case):
            cells = case_cells(results, spec, case, conns)
            m = med_case(results, (spec.key, case, conns))
            size = body_sizes.get(f"{spec.key}/{case}")
            mbps = ""
            if m and size:
                rate = m.rps * size / 1e6
                mbps = fmt(rate, 1 if rate < 10 else 0)
            lines.append(row([label(spec), ENCODINGS[case], cells[0], mbps, *cells[1:]]))
    return lines


def large_section(
    results: Results, specs: Sequence[ServerSpec], body_sizes: dict[str, int], cases: list[str]
) -> list[str]:
    large = [c for c in (REST_JSON_1MIB, REST_BINARY_1MIB, GRPC_RAW_1MIB) if c in cases]
    if not large:
        return []
    return [
        "",
        f"### (c) FP32 [1,262144] (1 MiB), {TENSOR_CONNECTIONS} connections",
        "",
        "REST JSON: values in numpy's shortest float32 repr; REST binary: the binary tensor "
        "data extension both ways (`binary_data_output`); gRPC: `raw_input_contents`. "
        "request MB/s = req/s x request body bytes (10^6 B).",
        "",
        *tensor_table(results, specs, body_sizes, large),
    ]


def medium_section(
    results: Results, specs: Sequence[ServerSpec], body_sizes: dict[str, int], cases: list[str]
) -> list[str]:
    medium = [c for c in (REST_JSON_64X1024, REST_BYTES) if c in cases]
    if not medium:
        return []
    return [
        "",
        f"### (d) Medium tensors, OIP REST JSON, {TENSOR_CONNECTIONS} connections",
        "",
        "FP32 [64,1024] (256 KiB of floats; values in numpy's shortest float32 repr) and BYTES "
        "[1,128] (strings of 1 to 32 ASCII letters, JSON strings both ways). LitServe gets the "
        "same body through a LitAPI of ours (no OIP of its own: see its note above).",
        "",
        *tensor_table(results, specs, body_sizes, medium),
    ]


def batching_section(results: Results, what: str) -> list[str]:
    """The unbatched and batched MLP, the server's µs per request beside ONNX Runtime alone."""
    lines = [
        "",
        f"### Dynamic batching, {BATCHING_CONNECTIONS} connections",
        "",
        what + ".",
        "",
        row(
            [
                "model",
                "req/s",
                "p50 ms",
                "p99 ms",
                "req/s each run",
                "errors",
                "mean batch",
                "us per request (1 / req/s)",
                "server us per request",
            ]
        ),
        row(["---", "---:", "---:", "---:", "---", "---:", "---:", "---:", "---:"]),
    ]
    for model in rosetta.BATCHING_MODELS:
        cells = case_cells(results, BATCHING_VIEW, model, BATCHING_CONNECTIONS)
        sizes = results.batch_size.get(f"{BATCHING_VIEW.key}/{model}", [])
        us = server_us(results, model)
        spent = [fmt(us[0], 1), fmt(us[1], 1)] if us else ["—", "—"]
        lines.append(row([model, *cells, fmt(median(sizes), 1) if sizes else "—", *spent]))
    alone = ort_alone(results)
    if alone is not None:
        one, full = alone
        lines += [
            "",
            f"ONNX Runtime alone on this model (`bench/ort_alone.py`: no server, the session the "
            f"server makes from its model.yaml, pinned to the servers' CPU after each repeat; "
            f"medians): {one:.1f} us per row in a batch of {rosetta.BATCHING_ROWS[0]}, "
            f"{full:.1f} us per row in a batch of {rosetta.BATCHING_ROWS[1]}: {one / full:.2f}x, "
            f"the ratio with no server cost at all. Server us per request: 1 / req/s (the "
            f"server has one core) less ONNX Runtime's time for the request's row (at batch "
            f"{rosetta.BATCHING_ROWS[0]} unbatched, in a batch of {rosetta.BATCHING_ROWS[1]} "
            f"batched): HTTP, JSON, the queue, stacking and splitting, the answer. The batching "
            f"target is on the batched one.",
        ]
    return lines


def contended_section(results: Results, what: str) -> list[str]:
    """The batching MLP again, with busy loops on the server's core: batched against unbatched."""
    lines = [
        "",
        f"### Dynamic batching on a shared core, {BATCHING_CONNECTIONS} connections",
        "",
        what + ".",
        "",
        row(["model", "req/s", "p50 ms", "p99 ms", "req/s each run", "errors", "mean batch"]),
        row(["---", "---:", "---:", "---:", "---", "---:", "---:"]),
    ]
    for model in rosetta.BATCHING_MODELS:
        cells = case_cells(results, CONTENDED_VIEW, model, BATCHING_CONNECTIONS)
        sizes = results.batch_size.get(f"{CONTENDED_KEY}/{model}", [])
        lines.append(row([model, *cells, fmt(median(sizes), 1) if sizes else "—"]))
    gain = contended_gain(results)
    if gain is not None:
        lines += ["", f"Batched / unbatched on the shared core: {gain:.2f}x."]
    return lines


def contended_gain(results: Results) -> float | None:
    """Batched req/s over unbatched req/s (medians) in the contended batching case."""
    unbatched, batched = rosetta.BATCHING_MODELS
    return ratio(
        rps(results, CONTENDED_KEY, batched, BATCHING_CONNECTIONS),
        rps(results, CONTENDED_KEY, unbatched, BATCHING_CONNECTIONS),
    )


def mb(values: Sequence[float | None]) -> str:
    known = [v for v in values if v is not None]
    return fmt(median(known) / 1e6) if known else "—"


def memory_table(results: Results, specs: Sequence[ServerSpec]) -> list[str]:
    lines = [
        row(["server", "startup to ready s", "idle RSS MB", "peak RSS MB", "startup s each run"]),
        row(["---", "---:", "---:", "---:", "---"]),
    ]
    for spec in specs:
        runs = results.runs.get(spec.key, [])
        if not runs:
            continue
        startups = [r.startup for r in runs if r.startup is not None]
        each = ", ".join(f"{s:.2f}" for s in startups)
        failed = [r.failure for r in runs if r.failure]
        if failed:
            each += f" (failed: {failed[-1][:80]})"
        lines.append(
            row(
                [
                    label(spec),
                    fmt(median(startups), 2) if startups else "—",
                    mb([r.idle_rss for r in runs]),
                    mb([r.peak_rss for r in runs]),
                    each,
                ]
            )
        )
    return lines
