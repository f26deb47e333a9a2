"""rosettaserve against MLServer, KServe, Triton, LitServe and bare ceilings: one run, one table.

    .venv/bin/python bench/compare/driver.py [--duration 10] [--warmup 2] [--repeats 3]
        [--servers KEY ...] [--cases CASE ...] [--server-cpu 0] [--load-cpu 1]
        [--out bench/RESULTS.md] [--raw-dir DIR]

(``bench/compare/run`` installs the tools and the peers, then runs this.) Every server serves the
same identity model (FP32; BYTES for the string case). Each repeat starts every server afresh,
pinned to --server-cpu (so repeats are interleaved: repeat 1 of every server, then repeat 2,
...), measures its startup to ready and idle RSS, checks one answer per case, runs each case (a
warm-up run, then a measured run; wrk for REST, h2load for gRPC, one thread pinned to
--load-cpu), reads its peak RSS and stops it with SIGTERM. Tables show medians over the repeats;
the targets are ratios from the same run and, for dynamic batching, the server's time per
batched request.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import os
import shlex
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import rosetta
from bodies import Body, make_body
from cases import (
    ALL_CASES,
    BATCHING,
    BATCHING_CONTENDED,
    CONTENDED_HOGS,
    PEER_CASES,
    ROOT,
    RUNS,
    STARTUP,
    all_specs,
    measure_batching,
    measure_server,
    measure_startup,
)
from host import cpu_times, loadavg, steal_shares
from loadgen import Load
from measurements import Results
from peer_cases import measure_peer_cases
from report import BEGIN, END, report, write_section
from spec import ServerSpec


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--duration", type=int, default=10, help="seconds per measurement")
    parser.add_argument("--warmup", type=int, default=2, help="seconds of warm-up per case")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--servers", nargs="+", default=None, help="server keys (default: all)")
    parser.add_argument(
        "--cases", nargs="+", default=None, help=f"subset of {', '.join(ALL_CASES)} (default: all)"
    )
    parser.add_argument("--server-cpu", type=int, default=0)
    parser.add_argument("--load-cpu", type=int, default=1)
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "RESULTS.md")
    parser.add_argument("--raw-dir", type=Path, default=None, help="keep raw tool outputs here")
    args = parser.parse_args(argv)
    args.servers = split_list(args.servers)
    args.cases = split_list(args.cases) or list(ALL_CASES)
    unknown = set(args.cases) - set(ALL_CASES)
    if unknown:
        parser.error(f"unknown cases {sorted(unknown)}; known: {', '.join(ALL_CASES)}")
    return args


def split_list(values: list[str] | None) -> list[str] | None:
    if values is None:
        return None
    return [v for item in values for v in item.split(",") if v]


@contextlib.contextmanager
def raw_dir(path: Path | None) -> Iterator[Path]:
    if path is not None:
        path.mkdir(parents=True, exist_ok=True)
        yield path.resolve()
        return
    with tempfile.TemporaryDirectory(prefix="compare-raw-") as tmp:
        yield Path(tmp)


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    sys.path.insert(0, str(ROOT / "bench"))
    with contextlib.suppress(OSError):
        os.sched_setaffinity(0, {args.load_cpu})  # keep the driver off the server's core
    info = {
        "command": os.environ.get("COMPARE_COMMAND")
        or shlex.join(
            ["python", "bench/compare/driver.py", *(sys.argv[1:] if argv is None else argv)]
        ),
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "load_start": loadavg(),
    }
    began, ticks = time.monotonic(), cpu_times()
    with tempfile.TemporaryDirectory(prefix="compare-") as tmp, raw_dir(args.raw_dir) as raw:
        workdir = Path(tmp)
        specs, info["peers_note"] = all_specs(workdir)
        if info["peers_note"]:
            print(info["peers_note"], flush=True)
        if args.servers is not None:
            unknown = sorted(set(args.servers) - {s.key for s in specs})
            if unknown:
                print(f"unknown server keys {unknown}; known: {[s.key for s in specs]}")
            specs = [s for s in specs if s.key in args.servers]
        if set(args.cases) <= set(PEER_CASES):  # they start servers of their own
            specs = []
        runs = [(c, n) for c, n in RUNS if c in args.cases]
        body_cache: dict[str, Body] = {}
        body_sizes: dict[str, int] = {}

        def bodies(spec: ServerSpec, case: str) -> Body:
            key = f"{spec.key}/{case}"
            if key not in body_cache:
                body_cache[key] = make_body(spec, case, workdir)
                body_sizes[key] = len(body_cache[key].data)
            return body_cache[key]

        load = Load(args.load_cpu, args.duration, args.warmup, raw)
        results = Results()
        examples = rosetta.examples_spec(workdir) if STARTUP in args.cases else None
        print(
            f"servers: {', '.join(s.key for s in specs)}; cases: {', '.join(args.cases)}; "
            f"raw outputs: {raw}",
            flush=True,
        )
        for repeat in range(1, args.repeats + 1):
            for spec in specs:
                spec_runs = [(c, n) for c, n in runs if c in spec.cases]
                measure_server(
                    spec, spec_runs, bodies, args, repeat=repeat, results=results, load=load
                )
            if BATCHING in args.cases:
                info[BATCHING] = measure_batching(args, workdir, repeat, results, load)
            if BATCHING_CONTENDED in args.cases:
                info[BATCHING_CONTENDED] = measure_batching(
                    args, workdir, repeat, results, load, hogs=CONTENDED_HOGS
                )
            if examples is not None:
                measure_startup(args, examples, repeat, results, load)
        peers = measure_peer_cases(args, workdir, load)
        info["load_end"] = loadavg()
        info["steal"] = steal_shares(ticks, cpu_times())
        info["took"] = f"{(time.monotonic() - began) / 60:.1f} min"
        section = report(args, specs, results, body_sizes, info, peers=peers)
    print()
    print(section)
    write_section(args.out, section)
    print(f"written to {args.out} (between {BEGIN} and {END})")


if __name__ == "__main__":
    main()
