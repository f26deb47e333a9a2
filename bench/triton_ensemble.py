"""A three-step ensemble's overhead per request over calling its last step alone, on
rosettaserve and on Triton Inference Server 2.51 (nvidia-pytriton 0.7.0's binary, Python
backend), side by side in one run.

Run (from ``.venv-triton``, ``make install-triton``; wrk from Debian), holding the bench lock
(the servers' set-up is ``triton_side.py``'s):

    flock /work/scratch/bench.lock .venv-triton/bin/python bench/triton_ensemble.py

Both serve tests_triton's repository (the same models, written once): ``pipeline`` is the
ensemble scale -> add_one -> times_ten, ``times_ten`` its last step alone (one Python model).
The servers and their processes run on core ``--server-core``, wrk on ``--client-core``, one
connection (a request at a time), a JSON body of four FP32 values, ``--duration`` seconds after a
2 s warm-up, ``--repeats`` times alternating the two models. A request's time is 1 / req/s; the
ensemble's overhead is its time less the last step's (the medians of the repeats).
"""

from __future__ import annotations

import json
import statistics
import tempfile
from pathlib import Path

from triton_side import SERVERS, Load, Peer, arguments, pin_servers, serving, wrk_run

MODELS = ("pipeline", "times_ten")
INPUT = {"pipeline": "IN", "times_ten": "X"}
REPOSITORY = Path(__file__).resolve().parents[1] / "tests_triton" / "repository"
SCRIPT = """\
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.body = '{body}'
"""


def measure(peer: Peer, load: Load, repeats: int) -> dict[str, float]:
    """Microseconds a request, the median of the repeats, for each model."""
    scripts = {}
    for model in MODELS:
        tensor = {"name": INPUT[model], "datatype": "FP32", "shape": [4], "data": [1, 2, 3, 4]}
        scripts[model] = load.raw / f"{peer.name}_{model}.lua"
        scripts[model].write_text(SCRIPT.format(body=json.dumps({"inputs": [tensor]})))
    url = f"http://{peer.http}/v2/models/{{}}/infer"
    times: dict[str, list[float]] = {model: [] for model in MODELS}
    for model in MODELS:
        wrk_run(load, url.format(model), scripts[model], 2, f"{peer.name}-{model}-warmup")
    for repeat in range(repeats):
        for model in MODELS:
            tag = f"{peer.name}-{model}-r{repeat}"
            m = wrk_run(load, url.format(model), scripts[model], load.duration, tag)
            times[model].append(1e6 / m.rps)
    return {model: statistics.median(values) for model, values in times.items()}


def main() -> None:
    args = arguments(__doc__).parse_args()
    pin_servers(args.server_core)
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        load = Load(args.client_core, args.duration, 0, work)
        for name in SERVERS:
            with serving(name, REPOSITORY, work) as peer:
                results[name] = measure(peer, load, args.repeats)
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
