"""ONNX Runtime alone on a model, no server: microseconds per row at a few batch sizes.

    taskset -c 0 bench/.venvs/rosettaserve/bin/python bench/ort_alone.py MODEL_DIR \\
        [--version 1] [--rows 1 32] [--calls 300] [--rounds 5]

MODEL_DIR is a model's folder in a repository (``model.yaml`` and ``VERSION/model.onnx``). The
session is the one the server's onnx runtime makes from that ``model.yaml``'s parameters
(``rosettaserve.runtimes.onnx.session``); the input is one random FP32 row per batch row. Prints
one JSON object: {"rows": {"1": us_per_row, "32": us_per_row}}, each the best of --rounds rounds
of --calls calls. The ratio of the first to the last is what batching gives on this CPU for this
model with no server cost at all: bench/compare reports it beside the batching case.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np


def us_per_row(
    model_dir: Path, version: str, rows: Sequence[int], calls: int, rounds: int
) -> dict[int, float]:
    from rosettaserve.repository.config import read_config
    from rosettaserve.runtimes.onnx import DEFAULT_FILE
    from rosettaserve.runtimes.onnx import session as make_session

    params = read_config(model_dir).parameters
    session = make_session(model_dir / version / DEFAULT_FILE, params)
    first = session.get_inputs()[0]
    features = int(first.shape[-1])
    rng = np.random.default_rng(0)
    best: dict[int, float] = {}
    for n in rows:
        feed = {first.name: rng.random((n, features), dtype=np.float32)}
        session.run(None, feed)  # first call: allocations, kernel selection
        times = []
        for _ in range(rounds):
            began = time.perf_counter()
            for _ in range(calls):
                session.run(None, feed)
            times.append((time.perf_counter() - began) / calls)
        best[n] = min(times) * 1e6 / n
    return best


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("model_dir", type=Path)
    parser.add_argument("--version", default="1")
    parser.add_argument("--rows", type=int, nargs="+", default=[1, 32])
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    found = us_per_row(args.model_dir, args.version, args.rows, args.calls, args.rounds)
    print(json.dumps({"rows": {str(n): round(us, 2) for n, us in found.items()}}))


if __name__ == "__main__":
    main()
