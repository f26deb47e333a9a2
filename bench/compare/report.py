"""The report: the markdown section with the setup, one table per case (medians over the repeats),
startup and memory, the targets (rosettaserve's ratios to the other servers of the same run)
and the flagged runs; and writing it between the markers of the results file.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import platform
import re
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import rosetta
from cases import BATCHING, BATCHING_CONNECTIONS
from measurements import Measurement, Results, median
from processes import SETTLE_BUSY, SETTLE_WINDOW
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

BEGIN, END = "<!-- compare:begin -->", "<!-- compare:end -->"
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


def fmt(value: float | None, digits: int = 0) -> str:
    if value is None or math.isnan(value):
        return "—"
    return f"{value:,.{digits}f}"


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


def median_known(values: Sequence[float]) -> float:
    known = [v for v in values if not math.isnan(v)]
    return median(known) if known else math.nan


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


def large_table(
    results: Results, specs: Sequence[ServerSpec], body_sizes: dict[str, int], cases: list[str]
) -> list[str]:
    encodings = {
        REST_JSON_1MIB: "REST JSON",
        REST_BINARY_1MIB: "REST binary",
        GRPC_RAW_1MIB: "gRPC raw",
    }
    names = {c: encodings[c] for c in cases}
    lines = [
        row(
            [
                "server",
                "encoding",
                "req/s",
                "request MB/s",
                "p50 ms",
                "p99 ms",
                "req/s each run",
                "errors",
            ]
        ),
        row(["---", "---", "---:", "---:", "---:", "---:", "---", "---:"]),
    ]
    for case, name in names.items():
        for spec in shown(specs, case):
            cells = case_cells(results, spec, case, 4)
            m = med_case(results, (spec.key, case, 4))
            size = body_sizes.get(f"{spec.key}/{case}")
            mbps = fmt(m.rps * size / 1e6) if m and size else ""
            lines.append(row([label(spec), name, cells[0], mbps, *cells[1:]]))
    return lines


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


def ort_alone(results: Results) -> tuple[float, float] | None:
    """ONNX Runtime's microseconds per row at batch 1 and in a full batch, no server (medians
    of bench/ort_alone.py's repeats); their ratio is what batching gives with no server cost."""
    one, full = (results.ort_alone.get(n) for n in rosetta.BATCHING_ROWS)
    return (median(one), median(full)) if one and full else None


def rps(results: Results, key: str | None, case: str, conns: int) -> float | None:
    if key is None:
        return None
    m = med_case(results, (key, case, conns))
    return m.rps if m else None


def ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


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
    out.append(versus(f"REST JSON 1 MiB: >= 3x {mls}", REST_JSON_1MIB, 4, mlservers, 3))
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
    batched = rps(results, "rosettaserve-batching", "mlp_batched", BATCHING_CONNECTIONS)
    unbatched = rps(results, "rosettaserve-batching", "mlp_unbatched", BATCHING_CONNECTIONS)
    out.append(
        Target(
            "dynamic batching: batched >= 3x unbatched",
            ratio(batched, unbatched),
            3,
            "x",
            missing="not measured",
            note=(
                f"ONNX Runtime alone gives {alone[0] / alone[1]:.2f}x on this CPU"
                if (alone := ort_alone(results))
                else ""
            ),
        )
    )
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
    idle = [r.idle_rss for r in results.runs.get(me, []) if r.idle_rss is not None]
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


def tool_versions() -> list[str]:
    def first_line(cmd: list[str]) -> str:
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        except OSError:
            return "missing"
        return (
            (proc.stdout + proc.stderr).strip().splitlines()[0]
            if proc.stdout + proc.stderr
            else "?"
        )

    packages = first_line(
        ["dpkg-query", "-W", "-f=${Package} ${Version}, ", "wrk", "nghttp2-client"]
    )
    import grpc

    return [
        f"wrk: `{first_line(['wrk', '-v'])}`",
        f"h2load: `{first_line(['h2load', '--version'])}`",
        f"Debian packages: {packages.rstrip(', ')}",
        f"driver: Python {platform.python_version()}, numpy {np.__version__}, "
        f"grpcio {grpc.__version__} (answer checks only)",
    ]


def machine() -> str:
    model = ""
    with contextlib.suppress(OSError):
        found = re.search(r"^model name\s*:\s*(.+)$", Path("/proc/cpuinfo").read_text(), re.M)
        model = found.group(1) if found else ""
    return f"{os.cpu_count()} CPUs ({model}), Linux {platform.release()}"


def loadavg() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def cpu_times() -> dict[str, list[int]]:
    """Each CPU's line of /proc/stat (``cpu0``: user, nice, system, idle, iowait, irq, softirq,
    steal, ...; in clock ticks since boot)."""
    lines = Path("/proc/stat").read_text().splitlines()
    return {p[0]: [int(v) for v in p[1:]] for p in map(str.split, lines) if p[0][3:].isdigit()}


def steal_shares(before: dict[str, list[int]], after: dict[str, list[int]]) -> str:
    """How much of each CPU's time the hypervisor gave to other guests in between (steal)."""
    shares = []
    for cpu, ticks in after.items():
        spent = [b - a for a, b in zip(before.get(cpu, ticks), ticks, strict=True)]
        if sum(spent) > 0 and len(spent) > 7:
            shares.append(f"{cpu} {spent[7] / sum(spent):.0%}")
    return ", ".join(shares) or "not reported"


def report(
    args: argparse.Namespace,
    specs: Sequence[ServerSpec],
    results: Results,
    body_sizes: dict[str, int],
    info: dict[str, str],
) -> str:
    lines = [
        "## rosettaserve vs MLServer and KServe (`bench/compare`)",
        "",
        "```",
        info["command"],
        "```",
        "",
        f"- date: {info['date']}; took {info['took']}",
        f"- machine: {machine()}; load average (1/5/15 min) {info['load_start']} at the start, "
        f"{info['load_end']} at the end; time stolen by the hypervisor (steal in /proc/stat) "
        f"over the run: {info['steal']}",
        f"- servers pinned to CPU {args.server_cpu} (`taskset`), the load generator and this "
        f"driver to CPU {args.load_cpu}; one load generator thread",
        f"- each measurement: {args.warmup} s warm-up then {args.duration} s measured; "
        f"{args.repeats} repeats, each starting every server afresh (repeat 1 of every server, "
        "then repeat 2, …); the tables show medians over the repeats",
        "- REST: `wrk -t1 --latency --timeout 30s` (p50/p99 from wrk); gRPC: `h2load -t1 -m1` "
        "(p50/p99 from its per-request `--log-file`); the warm-up is a separate run of the same "
        "tool; each case's answer is checked once (output == input; status only for the "
        "constant-answer ceilings) before it is measured",
        f"- before every run the driver waits until the server's process tree is idle (under "
        f"{SETTLE_BUSY:.0%} of a core over {SETTLE_WINDOW} s), so requests still in flight when "
        "the previous run stopped are not served during the next one",
        *[f"- {v}" for v in tool_versions()],
    ]
    if info.get("peers_note"):
        lines.append(f"- **{info['peers_note']}**")
    lines += [
        "",
        "Servers:",
        "",
        row(["server", "key", "reports (GET /v2)", "notes"]),
        row(["---"] * 4),
    ]
    for spec in specs:
        versions = sorted({r.version for r in results.runs.get(spec.key, []) if r.version})
        lines.append(row([label(spec), spec.key, ", ".join(versions) or "—", spec.notes]))
    if REST_SMALL in args.cases:
        lines += ["", "### (a) FP32 [1,4], OIP REST JSON", ""]
        lines += small_table(results, specs, REST_SMALL)
    if GRPC_SMALL in args.cases:
        lines += ["", "### (b) FP32 [1,4], OIP gRPC ModelInfer (fp32_contents)", ""]
        lines += small_table(results, specs, GRPC_SMALL)
    for case, (title, what) in TLS_TITLES.items():
        if case in args.cases:
            lines += ["", f"### {title}: {what}", ""]
            lines += small_table(results, [s for s in specs if case in s.cases], case)
    large = [c for c in (REST_JSON_1MIB, REST_BINARY_1MIB, GRPC_RAW_1MIB) if c in args.cases]
    if large:
        lines += [
            "",
            "### (c) FP32 [1,262144] (1 MiB), 4 connections",
            "",
            "REST JSON: values in numpy's shortest float32 repr; REST binary: the binary tensor "
            "data extension both ways (`binary_data_output`); gRPC: `raw_input_contents`. "
            "request MB/s = req/s x request body bytes (10^6 B).",
            "",
            *large_table(results, specs, body_sizes, large),
        ]
    if BATCHING in info:
        lines += [
            "",
            f"### Dynamic batching, {BATCHING_CONNECTIONS} connections",
            "",
            info[BATCHING] + ".",
            "",
            row(["model", "req/s", "p50 ms", "p99 ms", "req/s each run", "errors", "mean batch"]),
            row(["---", "---:", "---:", "---:", "---", "---:", "---:"]),
        ]
        for model in rosetta.BATCHING_MODELS:
            cells = case_cells(results, BATCHING_VIEW, model, BATCHING_CONNECTIONS)
            sizes = results.batch_size.get(model, [])
            lines.append(row([model, *cells, fmt(median(sizes), 1) if sizes else "—"]))
        alone = ort_alone(results)
        if alone is not None:
            one, full = alone
            lines += [
                "",
                f"ONNX Runtime alone on this model (`bench/ort_alone.py`: no server, the "
                f"session the server makes from its model.yaml, pinned to the servers' CPU "
                f"after each repeat; medians): "
                f"{one:.1f} us per row in a batch of {rosetta.BATCHING_ROWS[0]}, {full:.1f} us "
                f"per row in a batch of {rosetta.BATCHING_ROWS[1]}: {one / full:.2f}x. That is the "
                f"ratio with no server cost at all; a cost per request that both models pay "
                f"(HTTP, JSON, the data plane) brings it down from there.",
            ]
    memory_specs = [*specs, *(s for s in (EXAMPLES_VIEW, BATCHING_VIEW) if s.key in results.runs)]
    lines += [
        "",
        "### Startup and memory",
        "",
        "Startup: spawn to the ready path answering 200 (to the gRPC port accepting a connection "
        "where the server has no HTTP port)"
        + (
            ", at the second start of each repeat: the first, unmeasured, reads the server's files "
            "into the page cache (this machine evicts files left unread for a few minutes)"
            if args.warmup > 0
            else ""
        )
        + ". RSS: VmRSS (idle: 1 s after ready) and VmHWM (peak, after the server's cases) "
        "summed over the server's process tree; MB = 10^6 bytes.",
        "",
        *memory_table(results, memory_specs),
        "",
        "### Targets",
        "",
        "Ratios of rosettaserve's medians to the same run's medians of the other server (the "
        "best MLServer configuration where there are several).",
        "",
        row(["target", "measured", "result"]),
        row(["---", "---:", "---"]),
        *(row(t.cells()) for t in targets(results, specs, body_sizes)),
    ]
    flagged = sorted(
        k for k, runs in results.cases.items() if any(m.errors or m.note for m in runs)
    )
    notes = [
        f"{s}/{c}/{n} conns: "
        + "; ".join(
            f"repeat {i}: {m.errors} errors" + (f" ({m.note})" if m.note else "")
            for i, m in enumerate(results.cases[(s, c, n)], 1)
            if m.errors or m.note
        )
        for s, c, n in flagged
    ]
    if flagged:
        lines += ["", "**Flagged runs** (errors, or no request completed):", ""]
        lines += [f"- {n}" for n in notes]
    failures = [f"- {s}/{c}/{n} conns: {'; '.join(w)}" for (s, c, n), w in results.failures.items()]
    if failures:
        lines += ["", "Failures:", "", *failures]
    return "\n".join(lines) + "\n"


def write_section(out: Path, section: str) -> None:
    block = f"{BEGIN}\n{section}{END}\n"
    text = out.read_text() if out.exists() else "# Benchmark results\n"
    if BEGIN in text and END in text:
        head, rest = text.split(BEGIN, 1)
        tail = rest.split(END, 1)[1].lstrip("\n")
        text = head + block + ("\n" + tail if tail else "")
    else:
        text = text.rstrip("\n") + "\n\n" + block
    out.write_text(text)
