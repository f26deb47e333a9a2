"""JSON codecs on V2 (Open Inference Protocol) infer bodies: stdlib json vs orjson vs msgspec.

Run pinned to one core:  taskset -c 0 .venv/bin/python bench/json_codecs.py [--repeat 5]

Each row is the median of --repeat timeit runs (each run sized by Timer.autorange, ~0.2 s);
"x json" is how many times faster than the stdlib json row of the same case.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
import timeit
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import orjson

from rosettaserve.core import json_bulk
from rosettaserve.protocols.oip import convert

SMALL_REQ = b'{"inputs":[{"name":"INPUT0","datatype":"FP32","shape":[1,4],"data":[1,2,3,4]}]}'
BIG_N = 1 << 18  # 262144 FP32 values = 1 MiB of tensor data


class Input(msgspec.Struct):
    name: str
    datatype: str
    shape: list[int]
    data: list[float] | None = None
    parameters: dict[str, Any] | None = None


class InferRequest(msgspec.Struct):
    inputs: list[Input]
    id: str | None = None
    parameters: dict[str, Any] | None = None
    outputs: list[dict[str, Any]] | None = None


def big_request(widened: bool = True) -> bytes:
    """As tritonclient/kserve clients send it: float32 values widened to Python floats (17
    digits); else as bench/compare's 1 MiB case writes them (numpy's shortest float32 text)."""
    data = np.random.default_rng(0).random(BIG_N, dtype=np.float32)
    doc = {"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1, BIG_N]}]}
    doc["inputs"][0]["data"] = data.tolist()
    if widened:
        return json.dumps(doc, separators=(",", ":")).encode()
    head = json.dumps(doc, separators=(",", ":")).split('"data":')[0]
    return (head + '"data":[' + ",".join(str(v) for v in data) + "]}]}").encode()


def response(arr: np.ndarray) -> dict[str, Any]:
    out = {"name": "OUTPUT0", "datatype": "FP32", "shape": list(arr.shape), "data": arr}
    return {"model_name": "versioned_python", "model_version": "1", "outputs": [out]}


def with_list(doc: dict[str, Any]) -> dict[str, Any]:
    outs = [{**o, "data": o["data"].tolist()} for o in doc["outputs"]]
    return {**doc, "outputs": outs}


def decoders() -> dict[str, Callable[[bytes], Any]]:
    typed = msgspec.json.Decoder(InferRequest)
    return {
        "json.loads": json.loads,
        "orjson.loads": orjson.loads,
        "msgspec.json.decode": msgspec.json.decode,
        "msgspec typed Struct": typed.decode,
        "orjson.loads + np.asarray": lambda b: np.asarray(
            orjson.loads(b)["inputs"][0]["data"], dtype=np.float32
        ),
        "server: json_bulk": lambda b: (
            json_bulk.loads(b, b"data", convert._place_data) or orjson.loads(b)
        ),
    }


def encoders() -> dict[str, Callable[[dict[str, Any]], bytes]]:
    np_opt = orjson.OPT_SERIALIZE_NUMPY
    compact = (",", ":")
    return {
        "tolist + json.dumps": lambda d: json.dumps(with_list(d), separators=compact).encode(),
        "tolist + orjson.dumps": lambda d: orjson.dumps(with_list(d)),
        "tolist + msgspec.encode": lambda d: msgspec.json.encode(with_list(d)),
        "orjson OPT_SERIALIZE_NUMPY": lambda d: orjson.dumps(d, option=np_opt),
    }


def measure(fn: Callable[[], Any], repeat: int) -> float:
    timer = timeit.Timer(fn)
    number, _ = timer.autorange()
    return statistics.median(timer.repeat(repeat=repeat, number=number)) / number


def busy(cpus: set[int]) -> float:
    """Busy seconds of these cores since boot (/proc/stat, everything but idle and iowait)."""
    total = 0
    for line in Path("/proc/stat").read_text().splitlines():
        name, *ticks = line.split()
        if name.startswith("cpu") and name[3:].isdigit() and int(name[3:]) in cpus:
            total += sum(int(t) for t in ticks[:8]) - int(ticks[3]) - int(ticks[4])
    return total / os.sysconf("SC_CLK_TCK")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5, help="timeit runs per row (>= 3)")
    args = parser.parse_args()
    cpus = os.sched_getaffinity(0)
    t0, busy0, own0 = time.monotonic(), busy(cpus), time.process_time()
    big = big_request()
    arr = np.random.default_rng(1).random((1, BIG_N), dtype=np.float32)
    cases: list[tuple[str, dict[str, Callable[[], Any]]]] = []
    decode_cases = (
        ("decode small FP32[1,4]", SMALL_REQ),
        ("decode 1 MiB FP32", big),
        ("decode 1 MiB FP32 float32 text", big_request(widened=False)),
    )
    for label, body in decode_cases:
        fns = {name: (lambda f=f, b=body: f(b)) for name, f in decoders().items()}
        cases.append((f"{label} ({len(body)} B)", fns))
    small_arr = np.array([[1, 2, 3, 4]], dtype=np.float32)
    for label, a in (("encode small FP32[1,4]", small_arr), ("encode 1 MiB FP32", arr)):
        doc = response(a)
        fns = {name: (lambda f=f, d=doc: f(d)) for name, f in encoders().items()}
        cases.append((label, fns))

    print(f"{'case':34} {'codec':28} {'median us/op':>13} {'x json':>7} {'out bytes':>10}")
    for label, fns in cases:
        base = None
        for name, fn in fns.items():
            result = fn()
            t = measure(fn, args.repeat)
            base = base or t
            size = len(result) if isinstance(result, bytes) else ""
            print(f"{label:34} {name:28} {t * 1e6:13.2f} {base / t:7.2f} {size:>10}")
    check(big, arr)
    other = busy(cpus) - busy0 - (time.process_time() - own0)
    print(f"cpus {sorted(cpus)}: other processes used {100 * other / (time.monotonic() - t0):.0f}%")


def check(big: bytes, arr: np.ndarray) -> None:
    """The codecs must agree: same decoded values, and every encoding round-trips to FP32."""
    ref = json.loads(big)["inputs"][0]["data"]
    assert orjson.loads(big)["inputs"][0]["data"] == ref
    assert msgspec.json.decode(big)["inputs"][0]["data"] == ref
    assert msgspec.json.Decoder(InferRequest).decode(big).inputs[0].data == ref
    bulk = json_bulk.loads(big, b"data", convert._place_data)
    assert bulk is not None
    assert bulk["inputs"][0]["data"].tolist() == ref
    for name, enc in encoders().items():
        data = orjson.loads(enc(response(arr)))["outputs"][0]["data"]
        assert np.array_equal(np.asarray(data, dtype=np.float32), arr), name


if __name__ == "__main__":
    main()
