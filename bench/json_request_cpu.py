"""Server CPU per 1 MiB FP32 JSON request (bench/compare's "1 MiB JSON" body, identity model),
from the server's own /proc/PID/stat (utime + stime) over a run of requests on one
connection: a figure that other load on the machine hardly changes, unlike req/s.

    python bench/json_request_cpu.py SRC [SRC ...] [--rounds 3] [--requests 60]

Each SRC is a source tree (its src/ directory, compiled or not) served in turn, round by round,
with this interpreter; e.g. the tree before a change and after it.
"""

from __future__ import annotations

import argparse
import http.client
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

SHAPE = (1, 262144)
MODEL = "identity_fp32"
IDENTITY = Path(__file__).resolve().parents[1] / "tests" / "models" / "_identity" / "model.py"
YAML = (
    "runtime: python\nclass: Identity\n"
    "inputs: [{name: INPUT0, datatype: FP32, shape: [-1, -1]}]\n"
    "outputs: [{name: OUTPUT0, datatype: FP32, shape: [-1, -1]}]\n"
)


def body() -> bytes:
    x = np.random.default_rng(20260804).standard_normal(SHAPE).astype(np.float32)
    data = ",".join(str(v) for v in x.reshape(-1))  # numpy's shortest float32 repr
    head = f'{{"name":"INPUT0","shape":{list(SHAPE)},"datatype":"FP32"'.replace(" ", "")
    return f'{{"inputs":[{head},"data":[{data}]}}]}}'.encode()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def cpu_and_faults(pid: int) -> tuple[float, int]:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK"), int(fields[7])


def measure(src: str, repo: str, payload: bytes, requests: int) -> tuple[float, float]:
    port = free_port()
    cmd = [sys.executable, "-m", "rosettaserve", "serve", repo, "--http-port", str(port)]
    env = dict(os.environ, PYTHONPATH=src)
    quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
    server = subprocess.Popen([*cmd, "--grpc-port", "0"], env=env, **quiet)
    try:
        conn = wait_ready(port)
        path = f"/v2/models/{MODEL}/infer"
        for i in range(requests + 5):  # five to warm up
            if i == 5:
                cpu0, faults0 = cpu_and_faults(server.pid)
            conn.request("POST", path, payload, {"Content-Type": "application/json"})
            answer = conn.getresponse()
            text = answer.read()
            assert answer.status == 200, text[:300]
        cpu1, faults1 = cpu_and_faults(server.pid)
        return (cpu1 - cpu0) * 1e3 / requests, (faults1 - faults0) / requests
    finally:
        server.terminate()
        server.wait(timeout=30)


def wait_ready(port: int) -> http.client.HTTPConnection:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
            conn.request("GET", "/v2/health/ready")
            answer = conn.getresponse()
            answer.read()
            if answer.status == 200:
                return conn
        except OSError:
            time.sleep(0.1)
    raise SystemExit("the server did not become ready in 120 s")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("src", nargs="+")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--requests", type=int, default=60)
    args = parser.parse_args()
    payload = body()
    with tempfile.TemporaryDirectory() as repo:
        folder = Path(repo) / MODEL
        folder.mkdir()
        (folder / "model.py").write_text(IDENTITY.read_text())
        (folder / "model.yaml").write_text(YAML)
        results: dict[str, list[float]] = {src: [] for src in args.src}
        for _ in range(args.rounds):
            for src in args.src:
                ms, faults = measure(src, repo, payload, args.requests)
                results[src].append(ms)
                print(f"{src}: {ms:.2f} ms of server CPU a request, {faults:.0f} page faults")
        for src, values in results.items():
            print(f"median {src}: {sorted(values)[len(values) // 2]:.2f} ms")


if __name__ == "__main__":
    main()
