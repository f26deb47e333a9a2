"""The real TorchServe against rosettaserve serving the same .mar, side by side in one run.

Run (from TorchServe's venv, ``make install-torchserve``; wrk from Debian):

    .venv-torchserve/bin/python bench/torchserve_compare.py [--duration 10] [--repeats 3]
        [--workers 2 --isolation process] [--batch-size 8 --max-batch-delay 5]
        [--servers torchserve rosettaserve] [--processes 2]
        [--trees before=/path/to/src after=/path/to/src after2=/path/to/src,2]

Both serve the test archives of tests_torchserve (built with torch-model-archiver): ``linear``
(a BaseHandler subclass over a TorchScript Linear(4, 2)) takes the small request, a JSON row of
four numbers; ``echo`` (a function handler) takes the 1 MiB one, application/octet-stream bytes,
and answers a short JSON. TorchServe runs as its docs advise for throughput: as many workers a
model as cores (its default), no metrics, no token. rosettaserve runs ``runtime: torchserve``
with ``--workers`` handler workers a model, threads of its process or processes of their own
(``--isolation``, in its model.yaml), in ``--processes`` server processes sharing its port
(``rosettaserve serve --workers``; TorchServe's own frontend is one multi-threaded process
whatever its worker count). ``--trees`` names rosettaserve servers run from source trees
(``PYTHONPATH``; ``,N``: in N processes), measured in turn with the others: a before and an
after in one run. ``--batch-size`` and ``--max-batch-delay`` go into the archives'
model-config.yaml (``batchSize``, ``maxBatchDelay``), which both servers read: both batch
alike. Servers run on ``--server-cpus``, wrk on ``--load-cpus`` (taskset). wrk drives each case at 1
and 16 connections for ``--duration`` seconds after a 2 s warm-up; each server is measured
``--repeats`` times, in turn with the other; the table gives the medians of requests/s, p99
latency and the CPU time the server's processes took a request (user and system, from /proc: on
a shared host the one figure that other jobs do not move much).
``--json PATH`` also writes the medians there: ``bench/compare``'s ``torchserve`` case runs
this script (from this venv) and reads them.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.serverproc import served, start_server  # noqa: E402
from tests_torchserve.build_archives import ARCHIVES, build_repository, build_store  # noqa: E402
from tests_torchserve.conftest import run_torchserve  # noqa: E402

CASES = {  # name: (model, content type, body)
    "small": ("linear", "application/json", b"[1.0, 2.0, 3.0, 4.0]"),
    "1mib": ("echo", "application/octet-stream", os.urandom(1 << 20)),
}
SCRIPT = """\
wrk.method = "POST"
wrk.headers["Content-Type"] = "{ctype}"
local f = io.open("{body}", "rb")
wrk.body = f:read("*all")
f:close()
"""
Results = dict[tuple[str, int], tuple[float, float, float]]  # req/s, p99 ms, CPU us a request
TICK_S = 1 / os.sysconf("SC_CLK_TCK")


def wrk(
    url: str, connections: int, seconds: int, script: Path, cpus: str
) -> tuple[float, float, float]:
    """Requests/s, p99 latency (ms) and the CPU time (us) the server's processes took a request."""
    before = servers_cpu_s()
    cmd = ["taskset", "-c", cpus, "wrk", "-t1", f"-c{connections}", f"-d{int(seconds)}s",
           "--latency", "--timeout", "30s", "-s", str(script), url]  # fmt: skip
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    after = servers_cpu_s()
    requests = int(re.search(r"(\d+) requests in", out).group(1))  # type: ignore[union-attr]
    each = {name: (after[name] - before.get(name, 0.0)) / max(1, requests) * 1e6 for name in after}
    print(f"  {connections} connections, CPU us a request by process:",
          {name: round(us) for name, us in each.items() if us >= 1}, file=sys.stderr)  # fmt: skip
    cpu_s = sum(after.values()) - sum(before.values())
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))  # type: ignore[union-attr]
    p99 = re.search(r"99%\s+([\d.]+)(us|ms|s)", out)
    assert p99 is not None, out
    scale = {"us": 1e-3, "ms": 1.0, "s": 1e3}[p99.group(2)]
    if "Non-2xx" in out:
        raise SystemExit(f"errors in the run:\n{out}")
    return rps, float(p99.group(1)) * scale, cpu_s / max(1, requests) * 1e6


def servers_cpu_s() -> dict[str, float]:
    """User and system CPU time of every live process this one started (the server under test,
    its workers, TorchServe's JVM and Python workers), but wrk's, by process name and id."""
    stats, children = {}, collections.defaultdict(list)
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            text = (entry / "stat").read_text()
        except (OSError, ValueError):
            continue
        name, fields = text[text.index("(") + 1 : text.rindex(")")], text.rsplit(")", 1)[1].split()
        stats[int(entry.name)] = (name, int(fields[11]) + int(fields[12]))  # utime, stime
        children[int(fields[1])].append(int(entry.name))
    cpu: dict[str, float] = {}
    todo = list(children[os.getpid()])
    while todo:
        pid = todo.pop()
        todo += children[pid]
        name, ticks = stats[pid]
        if name not in ("wrk", "taskset"):
            cpu[f"{name}:{pid}"] = ticks * TICK_S
    return cpu


def measure(base: str, work: Path, args: argparse.Namespace) -> Results:
    results = {}
    for case, (model, ctype, body) in CASES.items():
        (work / f"{case}.bin").write_bytes(body)
        script = work / f"{case}.lua"
        script.write_text(SCRIPT.format(ctype=ctype, body=work / f"{case}.bin"))
        url = f"{base}/predictions/{model}"
        for connections in (1, 16):
            wrk(url, connections, 2, script, args.load_cpus)  # warm-up
            results[case, connections] = wrk(url, connections, args.duration, script,
                                             args.load_cpus)  # fmt: skip
    return results


def archives(args: argparse.Namespace) -> dict[str, tuple[str, bool, str]]:
    """The test archives, the benchmark's two with its settings in their model-config.yaml."""
    settings = ""
    if args.batch_size:
        settings = f"batchSize: {args.batch_size}\nmaxBatchDelay: {args.max_batch_delay}\n"
    chosen = dict(ARCHIVES)
    for model, _, _ in CASES.values():
        handler, serialized, config = chosen[model]
        chosen[model] = (handler, serialized, config + settings)
    return chosen


def run_once(name: str, store: Path, repo: Path, work: Path, args: argparse.Namespace) -> Results:
    if name == "torchserve":
        (work / "ts").mkdir(exist_ok=True)
        with run_torchserve(store, work / "ts", workers=len(os.sched_getaffinity(0))) as urls:
            return measure(urls[0], work, args)
    processes = args.processes
    trees = dict(tree.split("=", 1) for tree in args.trees)
    if name in trees:  # (the server inherits this process's environment)
        src, _, count = trees[name].partition(",")
        os.environ["PYTHONPATH"] = src
        processes = int(count or processes)
    server = start_server(repo, "--workers", str(processes))
    try:
        return measure(server.http_url, work, args)
    finally:
        for _ in served(server):
            pass


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--servers", nargs="+", default=["torchserve", "rosettaserve"])
    parser.add_argument("--workers", type=int, default=1, help="rosettaserve's, a model")
    parser.add_argument("--processes", type=int, default=1, help="rosettaserve's, sharing a port")
    parser.add_argument("--trees", nargs="*", default=[], help="NAME=SRC[,PROCESSES]")
    parser.add_argument("--isolation", choices=["thread", "process"], default="thread")
    parser.add_argument("--batch-size", type=int, default=0)
    parser.add_argument("--max-batch-delay", type=int, default=5, help="ms")
    parser.add_argument("--server-cpus", default="0,1")
    parser.add_argument("--load-cpus", default="1")
    parser.add_argument("--json", type=Path, default=None, help="also write the medians here")
    args = parser.parse_args()
    if args.trees:
        names = [tree.split("=", 1)[0] for tree in args.trees]
        args.servers = [n for n in args.servers if n != "rosettaserve"] + names
    # the servers (and their workers) inherit this process's CPUs; wrk runs on its own
    os.sched_setaffinity(0, {int(c) for c in args.server_cpus.split(",")})
    runs: dict[str, list[Results]] = {name: [] for name in args.servers}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        store = build_store(work / "store", work, archives(args))
        repo = build_repository(store, work / "repo")
        for model, _, _ in CASES.values():  # (TorchServe's own count stays a worker a core)
            yaml = f"runtime: torchserve\nisolation: {args.isolation}\n"
            yaml += f"parameters:\n  workers: {args.workers}\n"
            (repo / model / "model.yaml").write_text(yaml)
        for _ in range(args.repeats):
            for name in args.servers:
                runs[name].append(run_once(name, store, repo, work, args))
                print(name, runs[name][-1], file=sys.stderr, flush=True)
    report(runs)
    if args.json is not None:
        write_json(args.json, runs)


def medians(runs: dict[str, list[Results]]) -> dict[str, Results]:
    """Medians of each server's runs: req/s, p99 ms, server CPU us a request."""
    return {
        name: {key: (statistics.median(r[key][0] for r in results),
                     statistics.median(r[key][1] for r in results),
                     statistics.median(r[key][2] for r in results))
               for key in results[0]}
        for name, results in runs.items()
    }  # fmt: skip


def write_json(path: Path, runs: dict[str, list[Results]]) -> None:
    """The medians as JSON, for bench/compare's torchserve case (which runs this script from
    TorchServe's venv): {server: [[case, connections, req/s, p99 ms, CPU us a request], ...]}."""
    rows = {name: [[*key, *values] for key, values in by.items()] for name, by in
            medians(runs).items()}  # fmt: skip
    path.write_text(json.dumps(rows))


def report(runs: dict[str, list[Results]]) -> None:
    """The medians of each server's runs; then the ratios to TorchServe."""
    medians_ = medians(runs)
    names = list(medians_)
    head = " | ".join(f"{n} req/s | p99 ms | CPU us/req" for n in names)
    others = names[1:] if names[0] == "torchserve" else []  # each against TorchServe
    ratios = "".join(f" | {n} / torchserve" for n in others)
    print(f"| case | connections | {head}{ratios} |")
    print("|---|---|" + "---|---|---|" * len(names) + "---|" * len(others))
    for key in medians_[names[0]]:
        cells = " | ".join(
            f"{medians_[n][key][0]:.0f} | {medians_[n][key][1]:.1f} | {medians_[n][key][2]:.0f}"
            for n in names
        )
        for n in others:
            cells += f" | {medians_[n][key][0] / medians_[names[0]][key][0]:.1f}x"
        print(f"| {key[0]} | {key[1]} | {cells} |")


if __name__ == "__main__":
    main()
