"""--workers: SO_REUSEPORT worker processes vs a front process handing requests to a pool.

    .venv/bin/python bench/batching_workers.py [--duration 10] [--runs 3]

Part 1, the alternative's cost: what a front process pays per request to hand it to a pool
process and get the answer back (multiprocessing Pipe, pickle protocol 5; the request is a dict
with one FP32 [1, 4] array), measured as the front process's own CPU time per round trip,
against calling the model in-process.

Part 2, what was built: wrk (one thread, --connections, OIP REST JSON) against `rosettaserve
serve --workers 1` and `--workers 2`, for a small-tensor python model (`examples/models/
versioned_python`) and for a CPU-bound pure-Python model (~1 ms of bytecode per request, so the
GIL limits one process). Two placements: the server on core 0 with wrk on core 1 (the pinned
setup of every other benchmark here), and the server on both cores with wrk on core 1. Medians of
--runs; each run measures every configuration once, in turn; "> 2 s" counts requests that took
longer than wrk's timeout.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from served import start_ready

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
SMALL = b'{"inputs":[{"name":"INPUT0","datatype":"FP32","shape":[1,4],"data":[1,2,3,4]}]}'
BUSY_MODEL = """
import numpy as np
from rosettaserve import Model


class Busy(Model):
    def predict(self, inputs):
        total = 0
        for i in range(20000):  # pure-Python work: holds the GIL
            total += i * i
        return {"OUTPUT0": inputs["INPUT0"] + (total % 2)}
"""


# -- part 1: a front process and a pool ---------------------------------------------------------


def _model(inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    return {"OUTPUT0": inputs["INPUT0"] * 2}


def _pool_worker(conn: Any) -> None:
    while (request := conn.recv()) is not None:
        conn.send(_model(request))


def front_process_cost(n: int) -> dict[str, float]:
    inputs = {"INPUT0": np.arange(4, dtype=np.float32).reshape(1, 4)}
    t0 = time.process_time()
    for _ in range(n):
        _model(inputs)  # the in-process call, for scale
    local = (time.process_time() - t0) / n
    front, back = mp.Pipe()
    proc = mp.get_context("spawn").Process(target=_pool_worker, args=(back,))
    proc.start()
    front.send(inputs)
    front.recv()  # warm
    c0, w0 = time.process_time(), time.perf_counter()
    for _ in range(n):
        front.send(inputs)
        front.recv()
    cpu, wall = (time.process_time() - c0) / n, (time.perf_counter() - w0) / n
    front.send(None)
    proc.join()
    return {"in-process call": local, "front CPU per hand-off": cpu, "round trip": wall}


# -- part 2: the servers ------------------------------------------------------------------------


def make_repo(root: Path) -> Path:
    repo = root / "repo"
    repo.mkdir()
    subprocess.run(
        ["cp", "-r", str(ROOT / "examples/models/versioned_python"), str(repo)], check=True
    )
    busy = repo / "busy_python"
    busy.mkdir()
    (busy / "model.py").write_text(BUSY_MODEL)
    (busy / "model.yaml").write_text(
        "runtime: python\nclass: Busy\n"
        "inputs: [{name: INPUT0, datatype: FP32, shape: [-1, 4]}]\n"
        "outputs: [{name: OUTPUT0, datatype: FP32, shape: [-1, 4]}]\n"
    )
    return repo


def start(repo: Path, workers: int, cpus: str) -> tuple[subprocess.Popen[str], str]:
    cmd = ["taskset", "-c", cpus, str(BIN / "rosettaserve"), "serve", str(repo)]
    cmd += ["--http-port", "0", "--grpc-port", "0", "--workers", str(workers)]
    return start_ready([*cmd, "--log-level", "warning"])


def wrk(url: str, script: Path, args: argparse.Namespace) -> tuple[float, int]:
    """req/s, and how many requests took longer than wrk's 2 s timeout."""
    cmd = ["taskset", "-c", "1", "wrk", "-t1", f"-c{args.connections}", f"-d{args.duration}s"]
    out = subprocess.run([*cmd, "-s", str(script), url], check=True, capture_output=True, text=True)
    if "Non-2xx" in out.stdout:
        raise RuntimeError(out.stdout)
    late = re.search(r"timeout (\d+)", out.stdout)
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out.stdout).group(1))  # type: ignore[union-attr]
    return rps, int(late.group(1)) if late else 0


def servers(args: argparse.Namespace, root: Path) -> dict[str, list[tuple[float, int]]]:
    repo = make_repo(root)
    (root / "body.json").write_bytes(SMALL)
    script = root / "post.lua"
    script.write_text(
        f'local f = assert(io.open("{root / "body.json"}", "rb"))\nwrk.body = f:read("*a")\n'
        'f:close()\nwrk.method = "POST"\nwrk.headers["Content-Type"] = "application/json"\n'
    )
    paths = {
        "small": "/v2/models/versioned_python/versions/1/infer",
        "busy": "/v2/models/busy_python/infer",
    }
    results: dict[str, list[tuple[float, int]]] = {}
    for run in range(args.runs):
        for cpus, place in (("0", "server core 0"), ("0,1", "server cores 0-1")):
            for workers in (1, 2):
                proc, url = start(repo, workers, cpus)
                try:
                    for model, path in paths.items():
                        name = f"{model} | {place} | {workers}"
                        rps, late = wrk(url + path, script, args)
                        results.setdefault(name, []).append((rps, late))
                        print(f"run {run + 1}: {name}: {rps:.0f} ({late} late)", file=sys.stderr)
                finally:
                    proc.terminate()
                    proc.wait()
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--duration", type=int, default=10)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--connections", type=int, default=16)
    parser.add_argument("--handoffs", type=int, default=20000)
    args = parser.parse_args()
    cost = front_process_cost(args.handoffs)
    print("| front process + pool, per request | µs |\n|---|---|")
    for name, seconds in cost.items():
        print(f"| {name} | {seconds * 1e6:.1f} |")
    with tempfile.TemporaryDirectory() as tmp:
        results = servers(args, Path(tmp))
    print(f"\n| model | placement | workers | req/s (median of {args.runs}) | each run | > 2 s |")
    print("|---|---|---|---|---|---|")
    for name, values in results.items():
        each = ", ".join(f"{v:.0f}" for v, _ in values)
        late = sum(n for _, n in values)
        print(f"| {name} | {statistics.median(v for v, _ in values):.0f} | {each} | {late} |")


if __name__ == "__main__":
    main()
