"""ONNX Runtime alone on a model, no server: microseconds per row at a few batch sizes.

    taskset -c 0 bench/.venvs/rosettaserve/bin/python bench/ort_alone.py MODEL.onnx \\
        [--rows 1 32] [--calls 300] [--rounds 5]

The session is made as the server's onnx runtime makes it for the batching MLP (one intra-op and
one inter-op thread, CPU provider); the input is one random FP32 row per batch row. Prints one
JSON object: {"rows": {"1": us_per_row, "32": us_per_row}}, each the best of --rounds rounds of
--calls calls. The ratio of the first to the last is what batching can give at most on this CPU
for this model with no server cost at all: bench/compare reports it beside the batching case.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np


def us_per_row(model: Path, rows: Sequence[int], calls: int, rounds: int) -> dict[int, float]:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    session = ort.InferenceSession(str(model), options, providers=["CPUExecutionProvider"])
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
    parser.add_argument("model", type=Path)
    parser.add_argument("--rows", type=int, nargs="+", default=[1, 32])
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    found = us_per_row(args.model, args.rows, args.calls, args.rounds)
    print(json.dumps({"rows": {str(n): round(us, 2) for n, us in found.items()}}))


if __name__ == "__main__":
    main()
