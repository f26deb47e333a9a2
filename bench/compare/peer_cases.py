"""The two cases that measure a protocol of a server that stopped against what it is measured
by (issue 37): the real TorchServe against rosettaserve serving the same .mar, and TF Serving
gRPC Predict against OIP gRPC ModelInfer on one rosettaserve. Their set-up and measuring are
the standalone scripts' own (``bench/torchserve_compare.py``, ``bench/tfserving_grpc.py``), so
a figure in this report and one from the script are made the same way. Each case gives a table
and its targets; a case that cannot run says why and is skipped.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from cases import ROOT, TFSERVING_GRPC, TORCHSERVE
from figures import ratio
from loadgen import Load
from rosetta import identity_repo
from tables import fmt, row
from targets import Target

TS_VENV = ROOT / ".venv-torchserve"
TS_GOAL = 5.0  # rosettaserve's req/s over TorchServe's, small requests (issue 37, point 5)
TF_GOAL = 0.9  # TF Predict's req/s over OIP ModelInfer's on the same model
# the OIP call each TF Predict is measured by: the small tensor as tritonclient writes it
# (bench/compare's grpc_small), the 1 MiB one as raw bytes (grpc_raw_1mib)
TF_REFERENCE = {"small": "OIP ModelInfer (fp32_contents)", "1mib": "OIP ModelInfer (raw)"}
TF_PREDICT = "TF Predict (tensor_content)"


def measure_peer_cases(args: argparse.Namespace, workdir: Path, load: Load) -> list[PeerCase]:
    """The chosen ones, after the other cases: each runs its own ``--repeats``, interleaving the
    servers it compares (as its script does)."""
    peers = []
    if TORCHSERVE in args.cases:
        peers.append(measure_torchserve(args, load.raw))
    if TFSERVING_GRPC in args.cases:
        peers.append(measure_tfserving(args, workdir, load))
    return peers


@dataclass
class PeerCase:
    title: str
    what: str
    table: list[str] = field(default_factory=list)
    targets: list[Target] = field(default_factory=list)
    skipped: str = ""  # why the case did not run

    def section(self) -> list[str]:
        lines = ["", f"### {self.title}", "", self.what, ""]
        if self.skipped:
            return [*lines, f"**Skipped: {self.skipped}.**"]
        return lines + self.table

    def skip(self, why: str, goals: list[str]) -> PeerCase:
        self.skipped = why
        self.targets = [Target(g, None, 1.0, "x", missing=f"skipped: {why}") for g in goals]
        print(f"{self.title}: SKIPPED, {why}", flush=True)
        return self


def ts_goal(conns: int) -> str:
    return f"TorchServe .mar, small, {conns} conns: >= {TS_GOAL:.0f}x TorchServe's req/s"


def measure_torchserve(args: argparse.Namespace, raw: Path) -> PeerCase:
    """``bench/torchserve_compare.py`` from TorchServe's venv (its packages and JRE-run frontend
    are not in the driver's), both servers on the server's core: TorchServe with a worker a
    core (its default, as its docs advise), rosettaserve in as many server processes."""
    workers = 1  # the cores the servers run on: --server-cpu is one
    case = PeerCase(
        "TorchServe: the same .mar served by the real TorchServe and by rosettaserve",
        "`bench/torchserve_compare.py` run from `.venv-torchserve` (its set-up and measurement): "
        "tests_torchserve's archives, `linear` (a BaseHandler subclass, TorchScript "
        "Linear(4, 2)) for the small JSON row, `echo` (a function handler) for 1 MiB of "
        f"octet-stream; wrk at 1 and 16 connections, a 2 s warm-up, {args.duration} s measured, "
        f"{args.repeats} repeat(s) in turn, medians. TorchServe: {workers} worker a model (a "
        "worker per core of the server's cores, its default, as its docs advise), metrics off, "
        f"no token; rosettaserve (`runtime: torchserve`, this tree's `src`): {workers} server "
        f"process(es) (`serve --workers {workers}`), as many as TorchServe's workers. CPU µs a "
        "request: the server's processes' user + system time over the run.",
    )
    goals = [ts_goal(1), ts_goal(16)]
    python = TS_VENV / "bin" / "python"
    if not python.exists():
        return case.skip(f"{TS_VENV} is missing (`make install-torchserve` builds it)", goals)
    out, log = raw / "torchserve_compare.json", raw / "torchserve_compare.log"
    cmd = [str(python), str(ROOT / "bench" / "torchserve_compare.py"),
           "--duration", str(args.duration), "--repeats", str(args.repeats),
           "--server-cpus", str(args.server_cpu), "--load-cpus", str(args.load_cpu),
           "--processes", str(workers), "--json", str(out)]  # fmt: skip
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    print(f"{TORCHSERVE}: {' '.join(cmd[1:])} (log: {log})", flush=True)
    with log.open("w") as sink:
        done = subprocess.run(cmd, stdout=sink, stderr=subprocess.STDOUT, env=env, check=False)
    if done.returncode or not out.exists():
        tail = log.read_text().strip().splitlines()[-1:] or ["no output"]
        return case.skip(f"bench/torchserve_compare.py failed ({tail[0][:120]})", goals)
    medians = {name: {(c, n): v for c, n, *v in rows} for name, rows in
               json.loads(out.read_text()).items()}  # fmt: skip
    ts, me = medians["torchserve"], medians["rosettaserve"]
    case.table = [
        row(["input", "conns", "TorchServe req/s", "p99 ms", "CPU µs/req",
             "rosettaserve req/s", "p99 ms", "CPU µs/req", "rosettaserve / TorchServe"]),
        row(["---", "---:", "---:", "---:", "---:", "---:", "---:", "---:", "---:"]),
    ]  # fmt: skip
    for key, (rps, p99, cpu) in ts.items():
        mine = me.get(key, [float("nan")] * 3)
        gain = ratio(mine[0], rps)
        case.table.append(
            row([key[0], str(key[1]), fmt(rps), fmt(p99, 1), fmt(cpu), fmt(mine[0]),
                 fmt(mine[1], 1), fmt(mine[2]), f"{gain:.2f}x" if gain else "—"])
        )  # fmt: skip
    case.targets = [
        Target(ts_goal(n), ratio(me.get(("small", n), [None])[0], ts.get(("small", n), [None])[0]),
               TS_GOAL, "x", missing="not measured",
               note=f"rosettaserve in {workers} process(es), TorchServe {workers} worker(s)")
        for n in (1, 16)
    ]  # fmt: skip
    return case


def tf_goal(case: str, conns: int) -> str:
    return f"TF Predict {case}, {conns} conns: >= {TF_GOAL}x {TF_REFERENCE[case]}'s req/s"


def measure_tfserving(args: argparse.Namespace, workdir: Path, load: Load) -> PeerCase:
    """``bench/tfserving_grpc.py``'s server and calls, in this process: one rosettaserve on the
    server's core serving the identity model, every call in turn, ``--repeats`` times."""
    import tfserving_grpc as tfg

    case = PeerCase(
        "TF Serving gRPC Predict against OIP gRPC ModelInfer (one rosettaserve, same model)",
        "`bench/tfserving_grpc.py`'s server and calls: the python `identity` model, one "
        "`rosettaserve serve` (this tree's `src`) on the server's core, h2load on the load "
        "core; FP32 [1,4] (Predict: `tf.make_tensor_proto`'s `tensor_content`; ModelInfer: "
        "`fp32_contents`, and `raw_input_contents`) at 1 and 16 connections, FP32 [1,262144] "
        "(1 MiB, `tensor_content` / `raw_input_contents`) at 4. Each answer checked once, then "
        f"a {args.warmup} s warm-up and a {args.duration} s run per call, every call in turn, "
        f"{args.repeats} repeat(s), medians. Server CPU µs a call: its user + system time.",
    )
    goals = [tf_goal(c, n) for c, n in tfg.RUNS]
    try:
        proc, address = tfg.start(identity_repo(workdir), args.server_cpu)
    except SystemExit as exc:  # it printed no gRPC address
        return case.skip(f"bench/tfserving_grpc.py's server did not start ({exc})", goals)
    try:
        measured = tfg.medians(tfg.measure_all(load, address, proc.pid, args.repeats))
    except (OSError, RuntimeError, SystemExit, subprocess.SubprocessError) as exc:
        return case.skip(f"bench/tfserving_grpc.py failed ({str(exc)[:120]})", goals)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    case.table = [
        row(["input", "conns", "call", "req/s", "p50 ms", "p99 ms", "server CPU µs/call",
             "errors"]),
        row(["---", "---:", "---", "---:", "---:", "---:", "---:", "---:"]),
    ]  # fmt: skip
    for (name, conns, call), (rps, p50, p99, cpu, errors) in measured.items():
        case.table.append(
            row([name, str(conns), call, fmt(rps), fmt(p50, 2), fmt(p99, 2), fmt(cpu),
                 f"**{errors}**" if errors else "0"])
        )  # fmt: skip
    for name, conns in tfg.RUNS:
        tf, oip = (
            measured.get((name, conns, TF_PREDICT)),
            measured.get((name, conns, TF_REFERENCE[name])),
        )
        by_cpu = ratio(oip[3], tf[3]) if tf and oip else None
        case.targets.append(
            Target(tf_goal(name, conns), ratio(tf[0], oip[0]) if tf and oip else None, TF_GOAL,
                   "x", missing="not measured",
                   note=f"by server CPU a call {by_cpu:.2f}x" if by_cpu else "")
        )  # fmt: skip
    return case
