"""TF Serving REST predict vs the OIP JSON path on the same model, 1 MiB of FP32 per request.

Run:  taskset -c 0 .venv/bin/python bench/tfserving_predict.py [--runs 30] [--stages-only]

Each request carries 262144 FP32 values (1 MiB as binary) written as Python clients write them
(``json.dumps(array.tolist())``: float32 widened to 17-digit doubles, ~5 MB of JSON):

* TF row:   POST /v1/models/M:predict  {"instances": [...]}
* OIP JSON: POST /v2/models/M/infer    {"inputs": [{"name": "x", ..., "data": [...]}]}

on two models computing y = 0.5 * x + 2: ``half_plus_two`` (x FP32 [-1]: 262144 rows of one
value) and ``half_plus_two_2d`` (x FP32 [-1, -1]: 512 rows of 512 values).

Part 1 ("stages") times each step in this process, no HTTP: parsing the body, converting it to
arrays, writing the response; plus the alternatives considered for parsing (stdlib json, and
numpy's own text parsers, which are what "parse the numbers from the raw text" would use).
Part 2 ("http") starts ``rosettaserve serve`` on a temporary repository and sends --runs
sequential requests per case on one kept-alive connection: median and p90 wall time.
"""

from __future__ import annotations

import argparse
import http.client
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import timeit
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from rosettaserve.core.types import InferenceResponse, Tensor, TensorSpec
from rosettaserve.protocols.oip import convert as oip
from rosettaserve.protocols.tfserving import convert as tfs
from rosettaserve.protocols.tfserving import jsonio, tensors

ROOT = Path(__file__).resolve().parent.parent
N = 1 << 18  # 262144 FP32 values = 1 MiB
X = {"x": TensorSpec("x", "FP32", (-1,))}


def values(shape: tuple[int, ...]) -> np.ndarray:
    return np.random.default_rng(0).random(N, dtype=np.float32).reshape(shape)


def tf_body(arr: np.ndarray, nan: bool = False) -> bytes:
    body = json.dumps({"instances": arr.tolist()}).encode()
    return body.replace(b"[", b"[NaN, ", 1) if nan else body


def oip_body(arr: np.ndarray) -> bytes:
    doc = {"name": "x", "datatype": "FP32", "shape": list(arr.shape), "data": arr.tolist()}
    return json.dumps({"inputs": [doc]}).encode()


# -- part 1: stages ---------------------------------------------------------------------------


def best_ms(fn: Callable[[], Any], runs: int) -> float:
    return min(timeit.repeat(fn, number=1, repeat=runs)) * 1e3


def stages(runs: int) -> None:
    arr = values((N,))
    body, obody, nan_body = tf_body(arr), oip_body(arr), tf_body(arr, nan=True)
    flat_text = body[body.index(b"[") + 1 : body.rindex(b"]")]
    parsed = jsonio.load(body)
    request = oip.parse_infer(obody, None, "m", "")
    y = Tensor("y", "FP32", (N,), 0.5 * arr + 2)
    tiny = Tensor("y", "FP32", (N,), (arr * 1e-5).astype(np.float32))  # TF: scientific text
    out = InferenceResponse("m", "1", [y])
    rows = [
        ("body bytes: TF row / OIP", f"{len(body)} / {len(obody)}"),
        ("parse  TF   jsonio.load (orjson)", best_ms(lambda: jsonio.load(body), runs)),
        ("parse  OIP  orjson.loads", best_ms(lambda: orjson.loads(obody), runs)),
        ("parse  alt  stdlib json.loads", best_ms(lambda: json.loads(body), max(3, runs // 5))),
        ("parse  alt  np.fromstring(text, sep=',')", best_ms(
            lambda: np.fromstring(flat_text, dtype=np.float64, sep=","), max(3, runs // 5))),
        ("parse  NaN  jsonio.load with NaN (stdlib)", best_ms(
            lambda: jsonio.load(nan_body), max(3, runs // 5))),
        ("arrays TF   predict_inputs (vectorized)", best_ms(
            lambda: tfs.predict_inputs(parsed, X), runs)),
        ("arrays TF   with true/false elsewhere in the body", best_ms(
            lambda: tfs.predict_inputs(jsonio.Body(parsed.doc, True), X), runs)),
        ("arrays TF   element-by-element walk (errors, BYTES)", best_ms(
            lambda: tensors.walk(parsed.doc["instances"], "FP32"), max(3, runs // 5))),
        ("parse+arrays OIP  parse_infer", best_ms(
            lambda: oip.parse_infer(obody, None, "m", ""), runs)),
        ("write  TF   encode_predict (TF float text)", best_ms(
            lambda: tfs.encode_predict(tfs.ROW, {"y": y}), runs)),
        ("write  TF   values < 1e-4 (TF's 1.2345e-05 text)", best_ms(
            lambda: tfs.encode_predict(tfs.ROW, {"y": tiny}), max(3, runs // 5))),
        ("write  OIP  encode_infer (orjson shortest)", best_ms(
            lambda: oip.encode_infer(out, request), runs)),
    ]  # fmt: skip
    print(f"\nstages, best of {runs} (ms), {N} FP32 values:")
    for name, value in rows:
        shown = value if isinstance(value, str) else f"{value:8.1f}"
        print(f"  {name:48s} {shown}")


# -- part 2: HTTP -----------------------------------------------------------------------------


def repository(folder: Path) -> Path:
    source = ROOT / "examples" / "models" / "half_plus_two"
    shutil.copytree(source, folder / "half_plus_two")
    wide = folder / "half_plus_two_2d"
    shutil.copytree(source, wide)
    config = (wide / "model.yaml").read_text().replace("shape: [-1]}", "shape: [-1, -1]}")
    (wide / "model.yaml").write_text(config)
    return folder


def start(repo: Path) -> tuple[subprocess.Popen[str], str]:
    cmd = [sys.executable, "-m", "rosettaserve", "serve", str(repo), "--http-port", "0"]
    cmd += ["--grpc-port", "0", "--log-level", "warning"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert proc.stdout is not None
    for line in proc.stdout:
        if line.startswith("http: "):
            return proc, line.split("//", 1)[1].strip()
    raise RuntimeError("the server did not start")


def timed(hostport: str, path: str, body: bytes, runs: int) -> list[float]:
    host, port = hostport.rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=120)
    times = []
    for i in range(runs + 2):  # two warm-up requests
        start_s = time.perf_counter()
        conn.request("POST", path, body, {"Content-Type": "application/json"})
        response = conn.getresponse()
        data = response.read()
        if i >= 2:
            times.append((time.perf_counter() - start_s) * 1e3)
        if response.status != 200:
            raise RuntimeError(f"{path}: {response.status} {data[:200]!r}")
    conn.close()
    return times


def http_cases(runs: int) -> None:
    cases = []
    for model, shape in (("half_plus_two", (N,)), ("half_plus_two_2d", (512, 512))):
        arr = values(shape)
        cases += [
            (f"TF row    {model}", f"/v1/models/{model}:predict", tf_body(arr)),
            (f"OIP JSON  {model}", f"/v2/models/{model}/infer", oip_body(arr)),
        ]
    with tempfile.TemporaryDirectory() as tmp:
        proc, hostport = start(repository(Path(tmp)))
        try:
            time.sleep(1.0)
            print(f"\nHTTP, {runs} sequential requests per case, one connection (ms):")
            print(f"  {'case':28s} {'median':>8s} {'p90':>8s}")
            for name, path, body in cases:
                times = sorted(timed(hostport, path, body, runs))
                p90 = times[int(0.9 * (len(times) - 1))]
                print(f"  {name:28s} {statistics.median(times):8.1f} {p90:8.1f}")
        finally:
            proc.terminate()
            proc.wait(timeout=30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--stages-only", action="store_true")
    args = parser.parse_args()
    stages(args.runs)
    if not args.stages_only:
        http_cases(args.runs)


if __name__ == "__main__":
    main()
