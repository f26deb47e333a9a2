"""What writing a 1 MiB FP32 JSON answer costs, in process: OIP's encode_infer on an output of
[1, 262144] normal float32 values (bench/compare's "1 MiB JSON" tensor), with the C writer
(core/json_floats.c) and with orjson writing the array (what runs where it is not built).

    python bench/json_floats_cost.py [--rounds 40]

Prints the best time of each, alternated round by round (other load on the machine only
lengthens a round); for instruction counts run it under valgrind --tool=callgrind with
--only c or --only orjson. malloc is tuned as the server tunes it (server/malloc_tuning.py):
without, glibc maps fresh pages for each answer, ~1 ms of page faults the server does not have.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from rosettaserve.core import json_nonfinite
from rosettaserve.core.types import InferenceRequest, InferenceResponse, Tensor
from rosettaserve.protocols.oip import convert
from rosettaserve.server import malloc_tuning

SHAPE = (1, 262144)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--only", choices=["c", "orjson"])
    args = parser.parse_args()
    malloc_tuning.tune()
    data = np.random.default_rng(20260804).standard_normal(SHAPE).astype(np.float32)
    response = InferenceResponse("identity", "1", [Tensor("output", "FP32", SHAPE, data)])
    request = InferenceRequest("identity", [])
    writer = json_nonfinite.json_floats
    assert writer is not None, "json_floats is not built (scripts/compile_native.py)"
    ways = {"c": writer, "orjson": None}
    if args.only:
        ways = {args.only: ways[args.only]}
    texts = {}
    best = dict.fromkeys(ways, float("inf"))
    for _ in range(args.rounds):
        for name, module in ways.items():
            json_nonfinite.json_floats = module
            start = time.perf_counter()
            texts[name] = convert.encode_infer(response, request)[0]
            best[name] = min(best[name], time.perf_counter() - start)
    if len(texts) == 2:
        assert texts["c"] == texts["orjson"], "the two writers disagree"
    for name, seconds in best.items():
        per = seconds / data.size * 1e9
        print(f"{name:>7}: {seconds * 1e3:.2f} ms an answer, {per:.1f} ns a value")


if __name__ == "__main__":
    main()
