"""A three-step ensemble's overhead per request over calling its last step alone, on
rosettaserve and on Triton Inference Server 2.51 (nvidia-pytriton 0.7.0's binary, Python
backend), side by side in one run.

Run (from ``.venv-triton``, ``make install-triton``; wrk from Debian), holding the bench lock:

    flock /work/scratch/bench.lock .venv-triton/bin/python bench/triton_ensemble.py

Both serve tests_triton's repository (the same models, written once): ``pipeline`` is the
ensemble scale -> add_one -> times_ten, ``times_ten`` its last step alone (one Python model).
The servers and their processes run on core ``--server-core``, wrk on ``--client-core``, one
connection (a request at a time), a JSON body of four FP32 values, ``--duration`` seconds after a
2 s warm-up, ``--repeats`` times alternating the two models. A request's time is 1 / req/s; the
ensemble's overhead is its time less the last step's (the medians of the repeats).
"""

from __future__ import annotations

import argparse
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

from tests.serverproc import stop_cleanly  # noqa: E402
from tests_triton.servers import SERVERS, Peer, copy_repository, start  # noqa: E402

MODELS = ("pipeline", "times_ten")
INPUT = {"pipeline": "IN", "times_ten": "X"}
SCRIPT = """\
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.body = '{body}'
"""


def rps(url: str, script: Path, seconds: int, core: int) -> float:
    cmd = ["taskset", "-c", str(core), "wrk", "-t1", "-c1", f"-d{seconds}s", "-s", str(script)]
    out = subprocess.run([*cmd, url], capture_output=True, text=True, check=True).stdout
    if "Non-2xx" in out:
        raise SystemExit(f"errors in the run:\n{out}")
    found = re.search(r"Requests/sec:\s+([\d.]+)", out)
    assert found is not None, out
    return float(found.group(1))


def measure(peer: Peer, work: Path, args: argparse.Namespace) -> dict[str, float]:
    """Microseconds a request, the median of the repeats, for each model."""
    scripts = {}
    for model in MODELS:
        tensor = {"name": INPUT[model], "datatype": "FP32", "shape": [4], "data": [1, 2, 3, 4]}
        scripts[model] = work / f"{peer.name}_{model}.lua"
        scripts[model].write_text(SCRIPT.format(body=json.dumps({"inputs": [tensor]})))
    url = f"http://{peer.http}/v2/models/{{}}/infer"
    times: dict[str, list[float]] = {model: [] for model in MODELS}
    for model in MODELS:
        rps(url.format(model), scripts[model], 2, args.client_core)  # warm-up
    for _ in range(args.repeats):
        for model in MODELS:
            times[model].append(1e6 / rps(url.format(model), scripts[model], args.duration,
                                          args.client_core))  # fmt: skip
    return {model: statistics.median(values) for model, values in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--server-core", type=int, default=0)
    parser.add_argument("--client-core", type=int, default=1)
    args = parser.parse_args()
    os.sched_setaffinity(0, {args.server_core})  # the servers (and their children) inherit it
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        for name in SERVERS:
            peer = start(name, copy_repository(work / name / "repository"), work / name)
            try:
                results[name] = measure(peer, work, args)
            finally:
                stop_cleanly(peer.process)
    print("| server | times_ten alone µs | pipeline (3 steps) µs | ensemble overhead µs |")
    print("|---|---|---|---|")
    overhead = {}
    for name, times in results.items():
        overhead[name] = times["pipeline"] - times["times_ten"]
        print(f"| {name} | {times['times_ten']:.0f} | {times['pipeline']:.0f} "
              f"| {overhead[name]:.0f} |")  # fmt: skip
    ratio = overhead["triton"] / overhead["rosettaserve"]
    print(f"\nTriton's overhead / rosettaserve's: {ratio:.2f}x")


if __name__ == "__main__":
    main()
