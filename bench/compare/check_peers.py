"""Start each peer and ceiling (unpinned), send one request per case it serves, check the answer.

Run:  .venv/bin/python bench/compare/check_peers.py [KEY ...]
      (after: bash bench/compare/setup_peers.sh)

Identity peers must answer OUTPUT0 equal to INPUT0 (same datatype, shape and values: FP32, and
BYTES for the string case, compared as text); ceilings must answer OK with an FP32 [1,4]
OUTPUT0. Prints the seconds from start to ready per server, which event loop / HTTP parser
libraries the server process has loaded, and one line per server x case. Exits 1 if anything
failed.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import tritonclient.grpc as triton_grpc
import tritonclient.http as triton_http
from bodies import BYTES_SHAPE, MEDIUM_SHAPE, strings
from peers import peer_specs
from processes import process_tree
from spec import (
    GRPC_RAW_1MIB,
    GRPC_SMALL,
    REST_BINARY_1MIB,
    REST_BYTES,
    REST_JSON_1MIB,
    REST_JSON_64X1024,
    REST_SMALL,
    ServerSpec,
)
from tritonclient.grpc import service_pb2, service_pb2_grpc

ROOT = Path(__file__).resolve().parents[2]
READY_TIMEOUT = 120.0
SMALL = np.array([[1.0, 2.0, 3.0, 4.0]], dtype=np.float32)
LARGE = np.random.default_rng(0).standard_normal((1, 262144)).astype(np.float32)  # 1 MiB
MEDIUM = np.random.default_rng(1).standard_normal(MEDIUM_SHAPE).astype(np.float32)
WORDS = strings(BYTES_SHAPE, seed=2)
MARKERS = {"uvloop": "uvloop/loop.", "httptools": "httptools/parser/parser."}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def http_ready(port: int, path: str) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=1) as response:
            return bool(response.status == 200)
    except OSError:
        return False


def tcp_ready(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


class Running:
    """One server process started from its spec, with its ports and start-to-ready time."""

    def __init__(self, spec: ServerSpec, log: Path) -> None:
        self.spec = spec
        self.http_port, self.grpc_port = free_port(), free_port()
        ports = {"http_port": self.http_port, "grpc_port": self.grpc_port}
        argv = [arg.format(**ports) for arg in spec.argv]
        env = {**os.environ, **{k: v.format(**ports) for k, v in spec.env.items()}}
        self.log = log
        started = time.monotonic()
        with log.open("wb") as out:
            self.proc = subprocess.Popen(
                argv, env=env, cwd=spec.cwd, stdout=out, stderr=subprocess.STDOUT
            )
        self.ready_seconds = self._wait_ready(started)

    def _wait_ready(self, started: float) -> float:
        needs_grpc = bool(self.spec.cases & {GRPC_SMALL, GRPC_RAW_1MIB})
        path = self.spec.ready_path
        while time.monotonic() - started < READY_TIMEOUT:
            if self.proc.poll() is not None:
                raise RuntimeError(f"exited with {self.proc.returncode}; see {self.log}")
            http_ok = path is None or http_ready(self.http_port, path)
            grpc_ok = (path is not None and not needs_grpc) or tcp_ready(self.grpc_port)
            if http_ok and grpc_ok:
                return time.monotonic() - started
            time.sleep(0.05)
        raise RuntimeError(f"not ready after {READY_TIMEOUT:.0f} s; see {self.log}")

    def loaded(self) -> str:
        """Which markers a process of the server's tree has mapped (LitServe's HTTP server is a
        child process)."""
        maps = ""
        for pid in process_tree(self.proc.pid):
            with contextlib.suppress(OSError):
                maps += Path(f"/proc/{pid}/maps").read_text()
        return " ".join(f"{name}={'yes' if m in maps else 'no'}" for name, m in MARKERS.items())

    def stop(self) -> None:
        """SIGTERM; then SIGKILL to whatever of its process tree is left (a server's workers)."""
        tree = process_tree(self.proc.pid)
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        for pid in tree[1:]:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)


def rest(server: Running, data: np.ndarray, binary: bool, case: str) -> np.ndarray:
    spec = server.spec
    client = triton_http.InferenceServerClient(f"127.0.0.1:{server.http_port}")
    try:
        datatype = "BYTES" if data.dtype == object else "FP32"
        tensor = triton_http.InferInput(spec.input_name, list(data.shape), datatype)
        tensor.set_data_from_numpy(data, binary_data=binary)
        wanted = triton_http.InferRequestedOutput(spec.output_name, binary_data=binary)
        # tritonclient sends no Content-Type; KServe takes such a body for the binary extension
        headers = None if binary else {"Content-Type": "application/json"}
        model = spec.model_for(case)
        result = client.infer(model, [tensor], outputs=[wanted], headers=headers)
        out: np.ndarray = result.as_numpy(spec.output_name)
        return out
    finally:
        client.close()


def grpc_raw(server: Running, data: np.ndarray) -> np.ndarray:
    spec = server.spec
    client = triton_grpc.InferenceServerClient(f"127.0.0.1:{server.grpc_port}")
    try:
        tensor = triton_grpc.InferInput(spec.input_name, list(data.shape), "FP32")
        tensor.set_data_from_numpy(data)
        result = client.infer(spec.model_for(GRPC_RAW_1MIB), [tensor])
        out: np.ndarray = result.as_numpy(spec.output_name)
        return out
    finally:
        client.close()


def grpc_typed(server: Running, data: np.ndarray) -> np.ndarray:
    """ModelInfer with typed fp32_contents (tritonclient.grpc itself always sends raw)."""
    spec = server.spec
    request = service_pb2.ModelInferRequest(model_name=spec.model_for(GRPC_SMALL))
    tensor = request.inputs.add(name=spec.input_name, datatype="FP32", shape=list(data.shape))
    tensor.contents.fp32_contents.extend(data.ravel().tolist())
    with grpc.insecure_channel(f"127.0.0.1:{server.grpc_port}") as channel:
        response: Any = service_pb2_grpc.GRPCInferenceServiceStub(channel).ModelInfer(
            request, timeout=30
        )
    output = next(o for o in response.outputs if o.name == spec.output_name)
    if output.datatype != "FP32":
        raise ValueError(f"datatype {output.datatype}")
    if response.raw_output_contents:
        values = np.frombuffer(response.raw_output_contents[0], dtype="<f4")
    else:
        values = np.array(output.contents.fp32_contents, dtype=np.float32)
    return values.reshape(list(output.shape))


CASES: dict[str, tuple[np.ndarray, Callable[[Running, np.ndarray], np.ndarray]]] = {
    REST_SMALL: (SMALL, lambda s, d: rest(s, d, binary=False, case=REST_SMALL)),
    GRPC_SMALL: (SMALL, grpc_typed),
    REST_JSON_1MIB: (LARGE, lambda s, d: rest(s, d, binary=False, case=REST_JSON_1MIB)),
    REST_BINARY_1MIB: (LARGE, lambda s, d: rest(s, d, binary=True, case=REST_BINARY_1MIB)),
    GRPC_RAW_1MIB: (LARGE, grpc_raw),
    REST_JSON_64X1024: (MEDIUM, lambda s, d: rest(s, d, binary=False, case=REST_JSON_64X1024)),
    REST_BYTES: (WORDS, lambda s, d: rest(s, d, binary=False, case=REST_BYTES)),
}


def as_text(values: np.ndarray) -> np.ndarray:
    """BYTES values as str (tritonclient gives bytes back)."""
    decoded = [v.decode() if isinstance(v, bytes) else v for v in values.reshape(-1)]
    return np.array(decoded, dtype=object).reshape(values.shape)


def check(server: Running, case: str) -> str:
    data, send = CASES[case]
    out = send(server, data)
    if out.dtype != data.dtype:
        raise ValueError(f"dtype {out.dtype}")
    if data.dtype == object:
        out = as_text(out)
    if server.spec.ceiling:
        if out.shape != (1, 4):
            raise ValueError(f"shape {out.shape}")
    elif out.shape != data.shape or not np.array_equal(out, data):
        raise ValueError(f"OUTPUT0 is not INPUT0 (shape {out.shape})")
    return "ok" if server.spec.ceiling else "output == input"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("keys", nargs="*", help="only these servers (default: all)")
    args = parser.parse_args()
    specs = [s for s in peer_specs(ROOT) if not args.keys or s.key in args.keys]
    for spec in (s for s in specs if s.tls):  # their answers: the driver's check (answers.py)
        print(f"skip {spec.key:14} a TLS ceiling: the driver checks its answer before measuring")
    specs = [s for s in specs if not s.tls]
    failed = 0
    logs = Path(tempfile.mkdtemp(prefix="check_peers."))
    for spec in specs:
        try:
            server = Running(spec, logs / f"{spec.key}.log")
        except RuntimeError as exc:
            print(f"FAIL {spec.key:14} start: {exc}")
            failed += 1
            continue
        try:
            print(f"---- {spec.name}: ready in {server.ready_seconds:.2f} s, {server.loaded()}")
            for case in (c for c in CASES if c in spec.cases):
                started = time.perf_counter()
                try:
                    what = check(server, case)
                except Exception as exc:
                    print(f"FAIL {spec.key:14} {case:17} {type(exc).__name__}: {exc}")
                    failed += 1
                    continue
                ms = (time.perf_counter() - started) * 1000
                print(f"PASS {spec.key:14} {case:17} {what} ({ms:.1f} ms)")
        finally:
            server.stop()
    print(f"logs: {logs}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
