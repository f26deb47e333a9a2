"""Instructions the server spends per request (callgrind), for the four kinds of traffic whose
cost a change of layout must not raise. Unlike CPU time, the figures do not move with the
machine's load: two runs agree within 0.02% (tensor cases) and 0.5% (``llm_token``: take the
median of a few, ``--repeat 3``).

    PYTHONPATH=TREE/src .venv/bin/python bench/instructions.py CASE [--rounds N]
        [--connections N] [--tokens N] [--streams N] [--repeat N] [--keep DIR] [--dry]

CASE:
- ``rest_small``: an OIP REST infer, FP32 [1,4] JSON, to a python identity model
  (bench/rest_path_instructions.py's request), 2000 rounds; ``--connections N``: each round one
  request on each of N connections (16: as under wrk's 16 connections);
- ``grpc_small``: an OIP gRPC ModelInfer, FP32 [1,4] in ``fp32_contents`` (bench/compare's
  tensor, bench/grpc_path_cost.py's request), on one HTTP/2 connection, 2000 rounds;
- ``tf_small``: TF Serving's gRPC Predict of the same tensor in ``tensor_content`` (as
  ``tf.make_tensor_proto`` writes it), otherwise as ``grpc_small``;
- ``batched``: bench/batching_instructions.py's case: a row of 128 features as a Python client
  writes them, 32 connections a round, a model batching up to 32 with no queue delay, 100
  rounds;
- ``llm_token``: one streamed token of an OpenAI chat completion (``stream: true``, greedy,
  ``ignore_eos``) on examples/models/tiny_llama, ``--streams`` requests decoding together
  (default 4; with 1, runs move by up to 1%: each step's wake-up, and the type lookups that
  miss CPython's cache the engine's thread shares, fall on one token).

How: the server runs in the measured process, started as the command line starts it
(``Server(Settings(...)).run()``, ``--log-level warning`` as bench/compare serves: no access
log), and its connections are fed bytes by hand (bench/inproc_server.py, which finds what it
needs by class name and on the wire: it runs on trees laid out differently). Instrumentation is
switched on after a warm-up and off after the measured rounds (``callgrind_control``): start-up
does not count. The server's periodic work (idle sweeps, watchdog) is stopped once it is ready:
it costs per second, not per request, and valgrind's slowdown would multiply it. A round sends
one request on each connection and runs the loop until the answers are written (as many writes
as a warm-up round made); every answer is then checked (status, whole, the model's output).

- tensor cases: the figure is the instructions of every thread over the measured rounds,
  divided by the requests (the event loop's thread does all of it). ROSETTASERVE_INLINE_US
  keeps the model's predict on the event loop as at full speed (under valgrind it is some 50
  times slower).
- ``llm_token``: the server's work per token besides the model: the instructions of the event
  loop's thread (HTTP/1.1, the OpenAI family's chunk, the generation plane, taking the engine's
  deltas) over ``--tokens`` (100) writes of each stream from its 8th on (the head, the prefill
  and the first tokens left out), divided by the tokens; each of those writes is checked to hold
  exactly one token. The engine's thread (the forward pass, sampling, detokenizing) is left out:
  printed apart, with the other threads. Two settings keep the threads' turns what they are at
  full speed, or at least the same in every run: the engine waits for the loop to pass each
  step's tokens on for at most 20 ms (runtimes/llm/stream.py), which the loop under valgrind
  would overrun, so the wait is made long; and the switch interval is made long, so that the
  threads take turns where they block and not where a time slice ends.

Needs valgrind (``apt-get install -y valgrind``: callgrind, callgrind_control) and, for the
compiled build, the tree's modules compiled (``scripts/compile_native.py`` in that tree). A run
takes under a minute (``llm_token``: two, loading torch under valgrind). Runs wait for each
other (a lock in the temporary folder) and each works in the same folder (TMPDIR/rosettaserve-
instructions-N): the measured process's memory is then laid out the same from run to run (in
a random folder, the same tree's figure moved by up to 0.7%). ``--repeat N``: N runs and their
median. Compare trees with the same options (the figure moves a little with ``--rounds``).
``--keep DIR`` keeps callgrind's files (``callgrind_annotate DIR/callgrind.out-01``: the loop's
thread); ``--dry`` runs the case without valgrind and checks the answers (seconds: try a tree
with it first).
"""

from __future__ import annotations

import argparse
import asyncio
import fcntl
import os
import re
import select
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
CASES = ("rest_small", "grpc_small", "tf_small", "batched", "llm_token")
TINY_LLAMA = HERE.parent / "examples" / "models" / "tiny_llama"


def wait(fds: str, tag: bytes) -> None:
    """In the measured process: say ``tag`` and wait until the parent has switched
    instrumentation (the loop's thread is held here meanwhile). A write, then a read that
    blocks: the same instructions however long the parent takes (polling a file would count
    one more look per tenth of a second)."""
    said, told = (int(fd) for fd in fds.split(","))
    os.write(said, tag)
    if os.read(told, 1) != tag:
        sys.exit("instructions.py: the measuring process went away")


def child(args: argparse.Namespace) -> None:
    from inproc_server import new_loop, serve
    from instruction_cases import RUNNERS

    async def run() -> None:
        served = await serve(repository=Path(args.repository), log_level="warning")
        runner = RUNNERS[args.case](served, args)
        await runner.warm_up()
        wait(args.fds, b"+")
        await runner.measure()
        wait(args.fds, b"-")
        problem = await runner.check()
        Path(f"{args.child}.units").write_text(f"{runner.units}\n{runner.what}\n{problem}")

    with asyncio.Runner(loop_factory=new_loop) as runner:
        runner.run(run())
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # the server, its engine threads and models: not stopped one by one


def repository(case: str, root: Path) -> Path:
    """The models ``case`` asks for, under ``root``."""
    repo = root / "repo"
    if case in ("rest_small", "grpc_small", "tf_small"):
        sys.path.insert(0, str(HERE / "compare"))
        from rosetta import identity_repo

        return identity_repo(root)
    if case == "batched":
        from batching_instructions import MODEL_PY, MODEL_YAML

        (repo / "head").mkdir(parents=True)
        (repo / "head" / "model.yaml").write_text(MODEL_YAML)
        (repo / "head" / "model.py").write_text(MODEL_PY)
        return repo
    repo.mkdir()
    (repo / "tiny_llama").symlink_to(TINY_LLAMA)
    return repo


def parent(args: argparse.Namespace) -> None:
    """``--repeat`` runs, one at a time (a lock, for every user of the machine), each in its own
    folder; the median of the figures."""
    root = Path(tempfile.gettempdir())
    with (root / "rosettaserve-instructions.lock").open("w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            print("waiting for another run of bench/instructions.py", file=sys.stderr)
            fcntl.flock(lock, fcntl.LOCK_EX)
        figures = []
        for run in range(args.repeat):
            folder = root / f"rosettaserve-instructions-{run}"
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir()
            try:
                figures.append(measure_once(args, folder, run))
            finally:
                shutil.rmtree(folder, ignore_errors=True)
    if len(figures) > 1 and not args.dry:
        low, high = min(figures), max(figures)
        print(
            f"{args.case}: median {statistics.median(figures):,.0f} instructions per "
            f"{'token' if args.case == 'llm_token' else 'request'} over {len(figures)} runs "
            f"({low:,.0f} to {high:,.0f}, {(high - low) / low:.2%} apart)"
        )


def measure_once(args: argparse.Namespace, folder: Path, run: int) -> float:
    """One measured process, in ``folder``: its figure (0 with ``--dry``). The folder is the
    same from run to run: in a random one (``mkdtemp``), the figure moved by up to 0.7% between
    runs (the process's memory laid out differently); in the same one, it moves by a few
    instructions."""
    out = f"{folder}/callgrind.out"
    valgrind = [
        "valgrind", "--tool=callgrind", "--instr-atstart=no", "--separate-threads=yes",
        f"--callgrind-out-file={out}",
    ]  # fmt: skip
    argv = [*([] if args.dry else valgrind), sys.executable, __file__, args.case]
    argv += ["--repository", str(repository(args.case, folder)), *child_options(args)]
    units, what, problem = run_measured(args, argv, folder)
    if problem.strip():
        sys.exit(f"{args.case}: the answers were wrong: {problem}")
    if args.dry:
        print(f"{args.case}: {units} {what}s answered and checked (no valgrind)")
        return 0.0
    threads = totals(out)
    if args.keep:
        kept = Path(args.keep) / (f"run{run}" if args.repeat > 1 else "")
        kept.mkdir(parents=True, exist_ok=True)
        for path in folder.glob("callgrind.out*"):
            shutil.copy(path, kept)
    return report(args, int(units), what, threads)


def run_measured(args: argparse.Namespace, argv: list[str], tmp: Path) -> tuple[str, str, str]:
    """Run the measured process, switch instrumentation on and off when it says; what it
    measured: units, what a unit is, a problem with the answers ("" if none)."""
    said, told = os.pipe(), os.pipe()  # the measured process's, the parent's
    marker = tmp / "marker"
    argv = [*argv, "--child", str(marker), "--fds", f"{said[1]},{told[0]}"]
    env = {**os.environ, "PYTHONHASHSEED": "0", "ROSETTASERVE_INLINE_US": "1000000"}
    errors = tmp / "stderr"
    with (
        errors.open("wb") as err,
        subprocess.Popen(
            argv, env=env, stdout=subprocess.DEVNULL, stderr=err, pass_fds=(said[1], told[0])
        ) as proc,
    ):
        os.close(said[1])
        os.close(told[0])
        for tag, switch in ((b"+", "on"), (b"-", "off")):
            while not select.select([said[0]], [], [], 0.5)[0]:
                if proc.poll() is not None:
                    sys.exit(f"the measured process ended: {errors.read_text()[-3000:]}")
            if os.read(said[0], 1) != tag:
                sys.exit(f"the measured process ended: {errors.read_text()[-3000:]}")
            if not args.dry:
                command = ["callgrind_control", "-i", switch, str(proc.pid)]
                subprocess.run(command, check=True, capture_output=True)
            os.write(told[1], tag)
        proc.wait(timeout=1800)
    for line in errors.read_text(errors="replace").splitlines():
        if not line.startswith("=="):  # valgrind's own lines
            print(f"  (measured process) {line}", file=sys.stderr)
    units = Path(f"{marker}.units")
    if not units.exists():
        sys.exit("the measured process did not finish")
    found, what, problem = [*units.read_text().split("\n", 2), ""][:3]
    return found, what.strip(), problem


def child_options(args: argparse.Namespace) -> list[str]:
    options = ["--connections", str(args.connections), "--streams", str(args.streams)]
    options += ["--tokens", str(args.tokens)]
    return options + (["--rounds", str(args.rounds)] if args.rounds else [])


def totals(out: str) -> dict[int, int]:
    """Instructions of each thread (callgrind's files ``OUT-01``, ``OUT-02``...)."""
    found: dict[int, int] = {}
    for path in Path(out).parent.glob(Path(out).name + "-*"):
        text = path.read_text(errors="replace")
        total = re.search(r"^totals: (\d+)", text, re.MULTILINE)
        if total is not None:
            found[int(path.name.rsplit("-", 1)[1])] = int(total.group(1))
    if not found:
        sys.exit(f"no callgrind output at {out}-*")
    return found


def report(args: argparse.Namespace, units: int, what: str, threads: dict[int, int]) -> float:
    loop_thread = threads.get(1, 0)
    every = sum(threads.values())
    others = every - loop_thread
    figure = loop_thread if args.case == "llm_token" else every
    print(f"{args.case}: {figure / units:,.0f} instructions per {what}")
    print(
        f"  loop thread {loop_thread / units:,.0f}, other threads {others / units:,.0f} "
        f"({len(threads)} threads), over {units} units"
    )
    return figure / units


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("case", choices=CASES)
    parser.add_argument("--rounds", type=int, default=0, help="measured rounds (0: the case's)")
    parser.add_argument(
        "--connections", type=int, default=1, help="the tensor cases: a request on each"
    )
    parser.add_argument("--tokens", type=int, default=100, help="llm_token: tokens per stream")
    parser.add_argument("--streams", type=int, default=4, help="llm_token: requests at once")
    parser.add_argument("--repeat", type=int, default=1, help="runs, each in its own folder")
    parser.add_argument("--keep", help="keep callgrind's files in this folder")
    parser.add_argument(
        "--dry", action="store_true", help="without valgrind: only check that the case runs"
    )
    parser.add_argument("--repository", help=argparse.SUPPRESS)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--fds", help=argparse.SUPPRESS)
    args = parser.parse_args()
    sys.path.insert(0, str(HERE))
    if args.child:
        child(args)
    else:
        parent(args)


if __name__ == "__main__":
    main()
