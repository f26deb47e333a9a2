"""The report: the markdown section with the setup, the servers, the tables (``tables.py``),
the targets (``targets.py``) and the flagged runs; and writing it between the markers of the
results file.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

from cases import BATCHING, BATCHING_CONTENDED
from host import machine, tool_versions
from measurements import Results
from peer_cases import PeerCase
from processes import SETTLE_BUSY, SETTLE_WINDOW
from spec import GRPC_SMALL, REST_SMALL, ServerSpec
from tables import (
    BATCHING_VIEW,
    EXAMPLES_VIEW,
    TLS_TITLES,
    batching_section,
    contended_section,
    label,
    large_section,
    medium_section,
    memory_table,
    row,
    small_table,
)
from targets import targets

BEGIN, END = "<!-- compare:begin -->", "<!-- compare:end -->"


def report(
    args: argparse.Namespace,
    specs: Sequence[ServerSpec],
    results: Results,
    body_sizes: dict[str, int],
    info: dict[str, str],
    *,
    peers: Sequence[PeerCase] = (),
) -> str:
    lines = [*setup_lines(args, info), *servers_table(results, specs)]
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
    lines += large_section(results, specs, body_sizes, args.cases)
    lines += medium_section(results, specs, body_sizes, args.cases)
    if BATCHING in info:
        lines += batching_section(results, info[BATCHING])
    if BATCHING_CONTENDED in info:
        lines += contended_section(results, info[BATCHING_CONTENDED])
    for peer in peers:
        lines += peer.section()
    lines += memory_section(args, results, specs)
    lines += [
        "",
        "### Targets",
        "",
        "Ratios of rosettaserve's medians to the same run's medians of the other server (the "
        "best MLServer configuration where there are several); for dynamic batching, the "
        "server's time per batched request; for the TorchServe and TF Predict cases, the ratios "
        "their sections give.",
        "",
        row(["target", "measured", "result"]),
        row(["---", "---:", "---"]),
        *(row(t.cells()) for t in targets(results, specs, body_sizes)),
        *(row(t.cells()) for peer in peers for t in peer.targets),
        *flagged_lines(results),
    ]
    return "\n".join(lines) + "\n"


def setup_lines(args: argparse.Namespace, info: dict[str, str]) -> list[str]:
    """The title, the command and how the run was made."""
    lines = [
        "## rosettaserve vs MLServer, KServe, Triton and LitServe (`bench/compare`)",
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
    return lines


def servers_table(results: Results, specs: Sequence[ServerSpec]) -> list[str]:
    lines = [
        "",
        "Servers:",
        "",
        row(["server", "key", "reports (GET /v2)", "notes"]),
        row(["---"] * 4),
    ]
    for spec in specs:
        versions = sorted({r.version for r in results.runs.get(spec.key, []) if r.version})
        lines.append(row([label(spec), spec.key, ", ".join(versions) or "—", spec.notes]))
    return lines


def memory_section(
    args: argparse.Namespace, results: Results, specs: Sequence[ServerSpec]
) -> list[str]:
    memory_specs = [*specs, *(s for s in (EXAMPLES_VIEW, BATCHING_VIEW) if s.key in results.runs)]
    return [
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
    ]


def flagged_lines(results: Results) -> list[str]:
    """The runs with errors or without a completed request, and the runs that failed."""
    lines: list[str] = []
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
    return lines


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
