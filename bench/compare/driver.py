"""rosettaserve against MLServer, KServe and bare ceilings: one run, one load generator, one table.

    .venv/bin/python bench/compare/driver.py [--duration 10] [--warmup 2] [--repeats 3]
        [--servers KEY ...] [--cases CASE ...] [--server-cpu 0] [--load-cpu 1]
        [--out bench/RESULTS.md] [--raw-dir DIR]

(``bench/compare/run`` installs the tools and the peers, then runs this.) Every server serves the
same identity FP32 model. Each repeat starts every server afresh, pinned to --server-cpu (so
repeats are interleaved: repeat 1 of every server, then repeat 2, ...), measures its startup to
ready and idle RSS, checks one answer per case, runs each case (a warm-up run, then a measured
run; wrk for REST, h2load for gRPC, one thread pinned to --load-cpu), reads its peak RSS and stops
it with SIGTERM. Tables show medians over the repeats; the targets are ratios from the same run.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import http.client
import importlib
import json
import math
import os
import platform
import re
import shlex
import signal
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import rosetta
from spec import (
    CASES,
    GRPC_RAW_1MIB,
    GRPC_SMALL,
    REST_BINARY_1MIB,
    REST_JSON_1MIB,
    REST_SMALL,
    ServerSpec,
)

ROOT = Path(__file__).resolve().parents[2]
HOST = "127.0.0.1"
BEGIN, END = "<!-- compare:begin -->", "<!-- compare:end -->"
BATCHING, STARTUP = "batching", "startup"
ALL_CASES = (*CASES, BATCHING, STARTUP)
SMALL_SHAPE, LARGE_SHAPE = (1, 4), (1, 262144)
# (case, connections) in the order they run
RUNS = (
    (REST_SMALL, 1),
    (REST_SMALL, 16),
    (GRPC_SMALL, 1),
    (GRPC_SMALL, 16),
    (REST_JSON_1MIB, 4),
    (REST_BINARY_1MIB, 4),
    (GRPC_RAW_1MIB, 4),
)
BATCHING_CONNECTIONS = 32
GRPC_INFER = "/inference.GRPCInferenceService/ModelInfer"
# rows of the report for the servers rosetta.py starts besides the identity one
EXAMPLES_VIEW = ServerSpec(
    name="rosettaserve (tensor examples)", key="rosettaserve-examples", argv=(), cases=frozenset()
)
BATCHING_VIEW = ServerSpec(
    name="rosettaserve (batching MLP)",
    key="rosettaserve-batching",
    argv=(),
    cases=frozenset(rosetta.BATCHING_MODELS),
)
READY_TIMEOUT = 180.0
STOP_TIMEOUT = 10.0
LOAD_TIMEOUT = "30s"  # wrk's per-request timeout (its default, 2 s, is short for 1 MiB JSON)
SETTLE_WINDOW, SETTLE_BUSY, SETTLE_TIMEOUT = 0.25, 0.1, 60.0


# -- measurements ------------------------------------------------------------------------------


@dataclass
class Measurement:
    rps: float
    p50: float  # ms
    p99: float  # ms
    requests: int
    errors: int
    note: str = ""


@dataclass
class ServerRun:
    """One start of one server: what it cost and how it did."""

    startup: float | None = None  # s
    idle_rss: float | None = None  # bytes
    peak_rss: float | None = None  # bytes
    version: str = ""
    failure: str = ""


@dataclass
class Results:
    runs: dict[str, list[ServerRun]] = field(default_factory=dict)
    cases: dict[tuple[str, str, int], list[Measurement]] = field(default_factory=dict)
    failures: dict[tuple[str, str, int], list[str]] = field(default_factory=dict)
    batch_size: dict[str, list[float]] = field(default_factory=dict)

    def add(self, key: tuple[str, str, int], m: Measurement) -> None:
        self.cases.setdefault(key, []).append(m)

    def fail(self, key: tuple[str, str, int], why: str) -> None:
        self.failures.setdefault(key, []).append(why)


def median(values: Sequence[float]) -> float:
    return float(statistics.median(values))


def to_ms(value: str) -> float:
    match = re.fullmatch(r"([\d.]+)(us|ms|s|m|h)", value.strip())
    if match is None:
        raise ValueError(f"not a duration: {value!r}")
    scale = {"us": 1e-3, "ms": 1.0, "s": 1e3, "m": 60e3, "h": 3600e3}[match.group(2)]
    return float(match.group(1)) * scale


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile of already sorted values."""
    if not sorted_values:
        return math.nan
    rank = max(1, math.ceil(q / 100 * len(sorted_values)))
    return sorted_values[rank - 1]


# -- processes ---------------------------------------------------------------------------------


def process_tree(root: int) -> list[int]:
    """``root`` and all its descendants, from /proc."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry.name))
    tree, todo = [], [root]
    while todo:
        pid = todo.pop()
        tree.append(pid)
        todo += children.get(pid, [])
    return tree


def status_kb(pid: int, field_name: str) -> int:
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return 0
    match = re.search(rf"^{field_name}:\s+(\d+) kB", text, re.M)
    return int(match.group(1)) if match else 0


def tree_memory(root: int, field_name: str) -> float:
    """VmRSS or VmHWM summed over the process tree, in bytes."""
    return float(sum(status_kb(pid, field_name) for pid in process_tree(root)) * 1024)


def tree_cpu(root: int) -> float:
    """CPU seconds (user + system) used so far by the live processes of the tree."""
    ticks = 0
    for pid in process_tree(root):
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        ticks += int(fields[11]) + int(fields[12])  # utime, stime
    return ticks / os.sysconf("SC_CLK_TCK")


def settle(server: Server) -> float:
    """Wait until the server is idle (its tree under SETTLE_BUSY of a core over SETTLE_WINDOW).

    A load generator stops with requests in flight; a server that does not cancel them keeps
    working on them. Without this the next run would start behind that backlog.
    """
    began = time.monotonic()
    before = tree_cpu(server.proc.pid)
    while time.monotonic() - began < SETTLE_TIMEOUT:
        time.sleep(SETTLE_WINDOW)
        now = tree_cpu(server.proc.pid)
        if now - before < SETTLE_BUSY * SETTLE_WINDOW:
            break
        before = now
    return time.monotonic() - began


def free_ports(n: int) -> list[int]:
    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind((HOST, 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


@dataclass
class Server:
    spec: ServerSpec
    proc: subprocess.Popen[bytes]
    http_port: int
    grpc_port: int
    log: Path
    started: float

    def rest_url(self, path: str) -> str:
        return f"http://{HOST}:{self.http_port}{path}"

    def log_tail(self, lines: int = 15) -> str:
        try:
            text = self.log.read_text(errors="replace").splitlines()
        except OSError:
            return ""
        return "\n".join(text[-lines:])


def substitute(value: str, http_port: int, grpc_port: int) -> str:
    # not str.format: env values may be JSON, braces and all
    return value.replace("{http_port}", str(http_port)).replace("{grpc_port}", str(grpc_port))


def start(spec: ServerSpec, cpu: int, log: Path) -> Server:
    http_port, grpc_port = free_ports(2)
    argv = [substitute(a, http_port, grpc_port) for a in spec.argv]
    env = dict(os.environ)
    env.update({k: substitute(v, http_port, grpc_port) for k, v in spec.env.items()})
    with log.open("wb") as out:
        started = time.monotonic()
        proc = subprocess.Popen(
            ["taskset", "-c", str(cpu), *argv],
            env=env,
            cwd=spec.cwd,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    return Server(spec, proc, http_port, grpc_port, log, started)


def is_ready(server: Server) -> bool:
    if server.spec.ready_path is None:
        with contextlib.suppress(OSError), socket.create_connection((HOST, server.grpc_port), 1):
            return True
        return False
    conn = http.client.HTTPConnection(HOST, server.http_port, timeout=2)
    try:
        conn.request("GET", server.spec.ready_path)
        return conn.getresponse().status == 200
    except (OSError, http.client.HTTPException):
        return False
    finally:
        conn.close()


def wait_ready(server: Server) -> float:
    """Seconds from spawn to ready."""
    while time.monotonic() - server.started < READY_TIMEOUT:
        if server.proc.poll() is not None:
            raise RuntimeError(
                f"{server.spec.key} exited with {server.proc.returncode} before it was ready:\n"
                + server.log_tail()
            )
        if is_ready(server):
            return time.monotonic() - server.started
        time.sleep(0.01)
    raise RuntimeError(
        f"{server.spec.key} not ready after {READY_TIMEOUT:.0f} s\n{server.log_tail()}"
    )


def stop(server: Server) -> None:
    """SIGTERM; after STOP_TIMEOUT the whole tree (by pid) and the session get SIGKILL."""
    tree = process_tree(server.proc.pid)
    if server.proc.poll() is None:
        server.proc.send_signal(signal.SIGTERM)
        try:
            server.proc.wait(STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            print(f"  {server.spec.key}: no exit {STOP_TIMEOUT:.0f} s after SIGTERM, killing")
    for pid in tree:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    with contextlib.suppress(OSError):
        os.killpg(server.proc.pid, signal.SIGKILL)  # the session this driver started for it
    with contextlib.suppress(subprocess.TimeoutExpired):
        server.proc.wait(5)


def server_version(server: Server) -> str:
    """name and version from OIP server metadata (GET /v2), where the server answers it."""
    if server.spec.ready_path is None:
        return ""
    conn = http.client.HTTPConnection(HOST, server.http_port, timeout=5)
    try:
        conn.request("GET", "/v2")
        resp = conn.getresponse()
        doc = json.loads(resp.read()) if resp.status == 200 else {}
        return f"{doc.get('name', '?')} {doc.get('version', '?')}" if doc else ""
    except (OSError, ValueError, http.client.HTTPException):
        return ""
    finally:
        conn.close()


# -- request bodies ----------------------------------------------------------------------------


@dataclass
class Body:
    """A request of one case for one server: the bytes the load generator sends, and its input."""

    path: Path  # body file (REST) or gRPC frame file
    data: bytes
    tensor: np.ndarray[Any, np.dtype[np.float32]]
    headers: dict[str, str]
    script: Path | None = None  # wrk lua script (REST)


def tensor_for(case: str) -> np.ndarray[Any, np.dtype[np.float32]]:
    shape = SMALL_SHAPE if case in (REST_SMALL, GRPC_SMALL) else LARGE_SHAPE
    seed = 20260801 if shape == SMALL_SHAPE else 20260802
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def json_body(spec: ServerSpec, tensor: np.ndarray[Any, np.dtype[np.float32]]) -> bytes:
    # str(np.float32) is numpy's shortest repr that reads back to the same float32
    data = ",".join(str(v) for v in tensor.reshape(-1))
    head = {"name": spec.input_name, "shape": list(tensor.shape), "datatype": "FP32"}
    return f'{{"inputs":[{json.dumps(head)[:-1]},"data":[{data}]}}]}}'.encode()


def binary_body(spec: ServerSpec, tensor: np.ndarray[Any, np.dtype[np.float32]]) -> bytes:
    raw = tensor.astype("<f4").tobytes()
    head = {
        "inputs": [
            {
                "name": spec.input_name,
                "shape": list(tensor.shape),
                "datatype": "FP32",
                "parameters": {"binary_data_size": len(raw)},
            }
        ],
        "parameters": {"binary_data_output": True},
    }
    return json.dumps(head, separators=(",", ":")).encode() + raw


def grpc_message(
    spec: ServerSpec, tensor: np.ndarray[Any, np.dtype[np.float32]], raw: bool
) -> bytes:
    from rosettaserve.protocols.oip.pb import grpc_service_pb2 as pb

    request = pb.ModelInferRequest(model_name=spec.model)
    item = request.inputs.add(name=spec.input_name, datatype="FP32", shape=list(tensor.shape))
    if raw:
        request.raw_input_contents.append(tensor.astype("<f4").tobytes())
    else:
        item.contents.fp32_contents.extend(tensor.reshape(-1).tolist())
    return bytes(request.SerializeToString())


def make_body(spec: ServerSpec, case: str, workdir: Path) -> Body:
    tensor = tensor_for(case)
    path = workdir / f"body-{spec.key}-{case}.bin"
    if case in (GRPC_SMALL, GRPC_RAW_1MIB):
        message = grpc_message(spec, tensor, raw=case == GRPC_RAW_1MIB)
        frame = b"\x00" + struct.pack(">I", len(message)) + message
        path.write_bytes(frame)
        headers = {"content-type": "application/grpc", "te": "trailers"}
        return Body(path, message, tensor, headers)
    if case == REST_BINARY_1MIB:
        data = binary_body(spec, tensor)
        headers = {
            "Content-Type": "application/octet-stream",
            "Inference-Header-Content-Length": str(len(data) - tensor.nbytes),
        }
    else:
        data = json_body(spec, tensor)
        headers = {"Content-Type": "application/json"}
    path.write_bytes(data)
    script = path.with_suffix(".lua")
    write_lua(script, path, headers)
    return Body(path, data, tensor, headers, script)


def write_lua(script: Path, body: Path, headers: dict[str, str]) -> None:
    lines = [
        f'local f = assert(io.open("{body}", "rb"))',
        'wrk.body = f:read("*a")',
        "f:close()",
        'wrk.method = "POST"',
    ]
    lines += [f'wrk.headers["{k}"] = "{v}"' for k, v in headers.items()]
    script.write_text("\n".join(lines) + "\n")


# -- checking one answer -----------------------------------------------------------------------


def rest_output(spec: ServerSpec, headers: dict[str, str], body: bytes) -> np.ndarray[Any, Any]:
    split = headers.get("inference-header-content-length")
    head = json.loads(body[: int(split)] if split else body)
    outputs = head.get("outputs") or []
    offset = int(split) if split else 0
    for out in outputs:
        size = (out.get("parameters") or {}).get("binary_data_size")
        if out.get("name") == spec.output_name or len(outputs) == 1:
            if size is not None:
                return np.frombuffer(body[offset : offset + int(size)], "<f4")
            return np.asarray(out["data"], dtype=np.float32).reshape(-1)
        offset += int(size or 0)
    raise ValueError(f"no output {spec.output_name} in the answer: {str(head)[:200]}")


def post(
    port: int, path: str, body: bytes, headers: dict[str, str]
) -> tuple[int, dict[str, str], bytes]:
    conn = http.client.HTTPConnection(HOST, port, timeout=120)
    try:
        conn.request("POST", path, body, headers)
        resp = conn.getresponse()
        data = resp.read()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, data
    finally:
        conn.close()


def check_rest(server: Server, body: Body) -> str:
    """'' if the answer is right, else what is wrong."""
    spec = server.spec
    status, headers, data = post(
        server.http_port, f"/v2/models/{spec.model}/infer", body.data, body.headers
    )
    if status != 200:
        return f"HTTP {status}: {data[:300]!r}"
    if spec.ceiling:
        return ""
    try:
        out = rest_output(spec, headers, data)
    except (ValueError, KeyError, TypeError) as exc:
        return f"unreadable answer: {exc}"
    if not np.array_equal(out, body.tensor.reshape(-1)):
        return f"output differs from the input (first values {out[:4].tolist()})"
    return ""


def check_grpc(server: Server, body: Body) -> tuple[str, int]:
    """('' or what is wrong, size of the answer's gRPC message)."""
    import grpc

    from rosettaserve.protocols.oip.pb import grpc_service_pb2 as pb

    limit = 64 * 1024 * 1024
    options = [("grpc.max_receive_message_length", limit), ("grpc.max_send_message_length", limit)]
    with grpc.insecure_channel(f"{HOST}:{server.grpc_port}", options=options) as channel:
        call = channel.unary_unary(
            GRPC_INFER,
            request_serializer=lambda b: b,
            response_deserializer=lambda b: b,
        )
        try:
            answer: bytes = call(body.data, timeout=120)
        except grpc.RpcError as exc:
            return f"gRPC {exc.code()}: {exc.details()}", 0
    if server.spec.ceiling:
        return "", len(answer)
    response = pb.ModelInferResponse.FromString(answer)
    names = [o.name for o in response.outputs]
    if server.spec.output_name not in names and len(names) != 1:
        return f"no output {server.spec.output_name} in {names}", len(answer)
    i = names.index(server.spec.output_name) if server.spec.output_name in names else 0
    if len(response.raw_output_contents) > i:
        out = np.frombuffer(response.raw_output_contents[i], "<f4")
    else:
        out = np.asarray(response.outputs[i].contents.fp32_contents, dtype=np.float32)
    if not np.array_equal(out, body.tensor.reshape(-1)):
        return f"output differs from the input (first values {out[:4].tolist()})", len(answer)
    return "", len(answer)


# -- load generators ---------------------------------------------------------------------------


@dataclass
class Load:
    """Where and how long the load generator runs."""

    cpu: int
    duration: int
    warmup: int
    raw: Path


def run_tool(cmd: list[str], out: Path) -> str:
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False)
    text = proc.stdout + proc.stderr
    out.write_text(shlex.join(cmd) + "\n\n" + text)
    if proc.returncode != 0:
        raise RuntimeError(f"{cmd[3]} exited with {proc.returncode}: {text[-500:]}")
    return text


def wrk(load: Load, url: str, script: Path, *, conns: int, seconds: int, tag: str) -> Measurement:
    cmd = ["taskset", "-c", str(load.cpu), "wrk", "-t1", f"-c{conns}", f"-d{seconds}s"]
    cmd += ["--timeout", LOAD_TIMEOUT, "--latency", "-s", str(script), url]
    return parse_wrk(run_tool(cmd, load.raw / f"{tag}.wrk.txt"))


def parse_wrk(out: str) -> Measurement:
    def find(pattern: str) -> str:
        match = re.search(pattern, out, re.M)
        if match is None:
            raise RuntimeError(f"wrk output without {pattern!r}:\n{out[-800:]}")
        return match.group(1)

    errors = 0
    socket_errors = re.search(
        r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", out
    )
    if socket_errors:
        errors += sum(int(g) for g in socket_errors.groups())
    non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    if non2xx:
        errors += int(non2xx.group(1))
    m = Measurement(
        rps=float(find(r"Requests/sec:\s+([\d.]+)")),
        p50=to_ms(find(r"^\s+50%\s+(\S+)")),
        p99=to_ms(find(r"^\s+99%\s+(\S+)")),
        requests=int(find(r"(\d+) requests in")),
        errors=errors,
    )
    if m.requests == 0:  # wrk then prints 0us percentiles
        m.p50 = m.p99 = math.nan
        m.note = "no request completed in the run"
    return m


def h2load(
    load: Load, url: str, body: Body, *, conns: int, seconds: int, tag: str, answer_size: int
) -> Measurement:
    """One h2load run. Its own --warm-up-time is not used: h2load's DATA byte count (which the
    gRPC error check needs) includes the warm-up, its request counts do not; the warm-up is a
    separate run instead, as for wrk."""
    log = load.raw / f"{tag}.h2load.log"
    cmd = ["taskset", "-c", str(load.cpu), "h2load", "-t1", f"-c{conns}", "-m1"]
    cmd += ["-D", str(seconds)]
    for k, v in body.headers.items():
        cmd += ["-H", f"{k}: {v}"]
    cmd += ["-d", str(body.path), "--log-file", str(log), url]
    return parse_h2load(run_tool(cmd, load.raw / f"{tag}.h2load.txt"), log, answer_size)


def parse_h2load(out: str, log: Path, answer_size: int) -> Measurement:
    """Throughput from h2load's summary, latency percentiles from its per-request log.

    h2load cannot see gRPC's grpc-status trailer: a failed call is an HTTP 200 without a message.
    So a mean DATA size per request well under the size of the checked answer is counted as
    failed calls.
    """
    summary = re.search(r"finished in [\d.]+\w+, ([\d.]+) req/s", out)
    counts = re.search(
        r"requests: (\d+) total, (\d+) started, (\d+) done, (\d+) succeeded, (\d+) failed, "
        r"(\d+) errored, (\d+) timeout",
        out,
    )
    statuses = re.search(r"status codes: (\d+) 2xx, (\d+) 3xx, (\d+) 4xx, (\d+) 5xx", out)
    data = re.search(r"\((\d+)\) data", out)
    if not (summary and counts and statuses and data):
        raise RuntimeError(f"unexpected h2load output:\n{out[-800:]}")
    done = int(counts.group(3))
    errors = sum(int(counts.group(i)) for i in (5, 6, 7))
    errors += int(statuses.group(3)) + int(statuses.group(4))
    times, bad_status = [], 0
    for line in log.read_text().splitlines():
        parts = line.split("\t")
        if len(parts) >= 3:
            if parts[1] != "200":
                bad_status += 1
            times.append(int(parts[2]) / 1000)
    times.sort()
    note = ""
    expected = answer_size + 5  # the gRPC frame of the checked answer
    if done and answer_size and int(data.group(1)) / done < 0.9 * expected:
        missing = done - int(data.group(1)) // expected
        errors += missing
        note = f"~{missing} calls without an answer message (gRPC errors)"
    if done == 0:
        note = "no request completed in the run"
    return Measurement(
        rps=float(summary.group(1)),
        p50=percentile(times, 50),
        p99=percentile(times, 99),
        requests=done,
        errors=max(errors, bad_status),
        note=note,
    )


# -- one server, one repeat --------------------------------------------------------------------


def measure_server(
    spec: ServerSpec,
    runs: Sequence[tuple[str, int]],
    bodies: Callable[[ServerSpec, str], Body],
    args: argparse.Namespace,
    *,
    repeat: int,
    results: Results,
    load: Load,
) -> None:
    record = ServerRun()
    results.runs.setdefault(spec.key, []).append(record)
    print(f"[repeat {repeat}] {spec.key}: starting", flush=True)
    server = start(spec, args.server_cpu, load.raw / f"r{repeat}-{spec.key}.server.log")
    try:
        record.startup = wait_ready(server)
        time.sleep(1.0)
        record.idle_rss = tree_memory(server.proc.pid, "VmRSS")
        record.version = server_version(server)
        print(
            f"  ready in {record.startup:.2f} s, idle RSS {record.idle_rss / 1e6:.0f} MB"
            + (f", {record.version}" if record.version else ""),
            flush=True,
        )
        for case, conns in runs:
            key = (spec.key, case, conns)
            tag = f"r{repeat}-{spec.key}-{case}-c{conns}"
            try:
                m = run_case(server, bodies(spec, case), case, conns=conns, load=load, tag=tag)
            except Exception as exc:
                results.fail(key, f"repeat {repeat}: {exc}")
                print(f"  {case} c{conns}: FAILED {exc}", flush=True)
                if server.proc.poll() is not None:
                    raise RuntimeError(f"server exited:\n{server.log_tail()}") from exc
                continue
            results.add(key, m)
            flag = f"  ({m.errors} ERRORS)" if m.errors else ""
            flag += f"  ({m.note})" if m.note else ""
            print(
                f"  {case} c{conns}: {m.rps:.0f} req/s, p50 {m.p50:.2f} ms, p99 {m.p99:.2f} ms"
                + flag,
                flush=True,
            )
        record.peak_rss = tree_memory(server.proc.pid, "VmHWM")
    except Exception as exc:
        record.failure = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        print(f"  {spec.key} FAILED: {exc}", flush=True)
    finally:
        stop(server)


def run_case(
    server: Server, body: Body, case: str, *, conns: int, load: Load, tag: str
) -> Measurement:
    """Check one answer, then a warm-up run and a measured run, each after the server settled."""
    grpc = case in (GRPC_SMALL, GRPC_RAW_1MIB)
    if grpc:
        wrong, answer_size = check_grpc(server, body)
        url = f"http://{HOST}:{server.grpc_port}{GRPC_INFER}"
    else:
        wrong, answer_size = check_rest(server, body), 0
        url = server.rest_url(f"/v2/models/{server.spec.model}/infer")
    if wrong:
        raise RuntimeError(f"wrong answer: {wrong}")

    def one_run(seconds: int, name: str) -> Measurement:
        waited = settle(server)
        if waited > 1:
            print(f"  (waited {waited:.1f} s for the server to be idle)", flush=True)
        if grpc:
            return h2load(
                load, url, body, conns=conns, seconds=seconds, tag=name, answer_size=answer_size
            )
        assert body.script is not None
        return wrk(load, url, body.script, conns=conns, seconds=seconds, tag=name)

    if load.warmup > 0:
        one_run(load.warmup, tag + "-warmup")
    return one_run(load.duration, tag)


def measure_batching(
    args: argparse.Namespace, workdir: Path, repeat: int, results: Results, load: Load
) -> str:
    import batching_mlp

    spec, data, headers, what = rosetta.batching_setup(workdir)
    path = workdir / "body-batching.bin"
    path.write_bytes(data)
    script = path.with_suffix(".lua")
    write_lua(script, path, headers)
    record = ServerRun()
    results.runs.setdefault(spec.key, []).append(record)
    print(f"[repeat {repeat}] {spec.key}: starting", flush=True)
    server = start(spec, args.server_cpu, load.raw / f"r{repeat}-{spec.key}.server.log")
    try:
        record.startup = wait_ready(server)
        url = server.rest_url("")
        batching_mlp.check_same_answers(url, data, headers)
        for model in rosetta.BATCHING_MODELS:
            key = (spec.key, model, BATCHING_CONNECTIONS)
            tag = f"r{repeat}-{spec.key}-{model}-c{BATCHING_CONNECTIONS}"
            target = f"{url}/v2/models/{model}/infer"
            try:
                if load.warmup > 0:
                    settle(server)
                    wrk(
                        load,
                        target,
                        script,
                        conns=BATCHING_CONNECTIONS,
                        seconds=load.warmup,
                        tag=tag + "-w",
                    )
                settle(server)
                m = wrk(
                    load, target, script, conns=BATCHING_CONNECTIONS, seconds=load.duration, tag=tag
                )
            except Exception as exc:
                results.fail(key, f"repeat {repeat}: {exc}")
                print(f"  {model}: FAILED {exc}", flush=True)
                continue
            results.add(key, m)
            results.batch_size.setdefault(model, []).append(batching_mlp.mean_batch(url, model))
            print(
                f"  {model}: {m.rps:.0f} req/s, p50 {m.p50:.2f} ms, p99 {m.p99:.2f} ms", flush=True
            )
        record.peak_rss = tree_memory(server.proc.pid, "VmHWM")
    except Exception as exc:
        record.failure = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        print(f"  {spec.key} FAILED: {exc}", flush=True)
    finally:
        stop(server)
    return what


def measure_startup(
    args: argparse.Namespace, spec: ServerSpec, repeat: int, results: Results, load: Load
) -> None:
    record = ServerRun()
    results.runs.setdefault(spec.key, []).append(record)
    server = start(spec, args.server_cpu, load.raw / f"r{repeat}-{spec.key}.server.log")
    try:
        record.startup = wait_ready(server)
        time.sleep(1.0)
        record.idle_rss = tree_memory(server.proc.pid, "VmRSS")
        record.peak_rss = tree_memory(server.proc.pid, "VmHWM")
        print(
            f"[repeat {repeat}] {spec.key}: ready in {record.startup:.2f} s, "
            f"idle RSS {record.idle_rss / 1e6:.0f} MB",
            flush=True,
        )
    except Exception as exc:
        record.failure = str(exc).splitlines()[0]
        print(f"  {spec.key} FAILED: {exc}", flush=True)
    finally:
        stop(server)


# -- the servers -------------------------------------------------------------------------------


def all_specs(workdir: Path) -> tuple[list[ServerSpec], str]:
    """rosettaserve's spec and the peers' (bench/compare/peers.py), and a note on the peers."""
    specs = [rosetta.rosetta_spec(workdir)]
    try:
        peers = importlib.import_module("peers")
    except ImportError as exc:
        return specs, f"peers not available (bench/compare/peers.py: {exc}); rosettaserve only"
    try:
        found = list(peers.peer_specs(ROOT))
    except Exception as exc:
        return specs, f"peers skipped: peer_specs failed: {exc}"
    return specs + [s for s in found if isinstance(s, ServerSpec)], ""


# -- the report --------------------------------------------------------------------------------


def fmt(value: float | None, digits: int = 0) -> str:
    if value is None or math.isnan(value):
        return "—"
    return f"{value:,.{digits}f}"


def med_case(results: Results, key: tuple[str, str, int]) -> Measurement | None:
    runs = results.cases.get(key)
    if not runs:
        return None
    return Measurement(
        rps=median([m.rps for m in runs]),
        p50=median_known([m.p50 for m in runs]),
        p99=median_known([m.p99 for m in runs]),
        requests=sum(m.requests for m in runs),
        errors=sum(m.errors for m in runs),
    )


def median_known(values: Sequence[float]) -> float:
    known = [v for v in values if not math.isnan(v)]
    return median(known) if known else math.nan


def label(spec: ServerSpec) -> str:
    return f"{spec.name} (ceiling)" if spec.ceiling else spec.name


def case_cells(results: Results, spec: ServerSpec, case: str, conns: int) -> list[str]:
    """req/s, p50, p99, req/s of each run, errors; or why there is no number."""
    key = (spec.key, case, conns)
    m = med_case(results, key)
    if m is None:
        why = "not served" if case not in spec.cases else "failed"
        starts = [r.failure for r in results.runs.get(spec.key, []) if r.failure]
        if starts and case in spec.cases:
            why = "server failed: " + starts[-1][:80]
        if key in results.failures:
            why = "failed: " + results.failures[key][-1].split(": ", 1)[-1][:80]
        return [why, "", "", "", ""]
    each = ", ".join(f"{r.rps:.0f}" for r in results.cases[key])
    errors = f"**{m.errors}**" if m.errors else "0"
    if any(r.requests == 0 for r in results.cases[key]):
        each += " (a run with no request completed)"
    return [fmt(m.rps), fmt(m.p50, 2), fmt(m.p99, 2), each, errors]


def shown(specs: Sequence[ServerSpec], case: str) -> list[ServerSpec]:
    """The servers of a case's table: those serving it, and every non-ceiling (as "not served")."""
    return [s for s in specs if case in s.cases or not s.ceiling]


def row(cells: Sequence[str]) -> str:
    return "| " + " | ".join(c.replace("|", "\\|").replace("\n", " ") for c in cells) + " |"


def small_table(results: Results, specs: Sequence[ServerSpec], case: str) -> list[str]:
    lines = [
        row(["server", "conns", "req/s", "p50 ms", "p99 ms", "req/s each run", "errors"]),
        row(["---", "---:", "---:", "---:", "---:", "---", "---:"]),
    ]
    for conns in (1, 16):
        for spec in shown(specs, case):
            lines.append(row([label(spec), str(conns), *case_cells(results, spec, case, conns)]))
    return lines


def large_table(
    results: Results, specs: Sequence[ServerSpec], body_sizes: dict[str, int], cases: list[str]
) -> list[str]:
    encodings = {
        REST_JSON_1MIB: "REST JSON",
        REST_BINARY_1MIB: "REST binary",
        GRPC_RAW_1MIB: "gRPC raw",
    }
    names = {c: encodings[c] for c in cases}
    lines = [
        row(
            [
                "server",
                "encoding",
                "req/s",
                "request MB/s",
                "p50 ms",
                "p99 ms",
                "req/s each run",
                "errors",
            ]
        ),
        row(["---", "---", "---:", "---:", "---:", "---:", "---", "---:"]),
    ]
    for case, name in names.items():
        for spec in shown(specs, case):
            cells = case_cells(results, spec, case, 4)
            m = med_case(results, (spec.key, case, 4))
            size = body_sizes.get(f"{spec.key}/{case}")
            mbps = fmt(m.rps * size / 1e6) if m and size else ""
            lines.append(row([label(spec), name, cells[0], mbps, *cells[1:]]))
    return lines


def mb(values: Sequence[float | None]) -> str:
    known = [v for v in values if v is not None]
    return fmt(median(known) / 1e6) if known else "—"


def memory_table(results: Results, specs: Sequence[ServerSpec]) -> list[str]:
    lines = [
        row(["server", "startup to ready s", "idle RSS MB", "peak RSS MB", "startup s each run"]),
        row(["---", "---:", "---:", "---:", "---"]),
    ]
    for spec in specs:
        runs = results.runs.get(spec.key, [])
        if not runs:
            continue
        startups = [r.startup for r in runs if r.startup is not None]
        each = ", ".join(f"{s:.2f}" for s in startups)
        failed = [r.failure for r in runs if r.failure]
        if failed:
            each += f" (failed: {failed[-1][:80]})"
        lines.append(
            row(
                [
                    label(spec),
                    fmt(median(startups), 2) if startups else "—",
                    mb([r.idle_rss for r in runs]),
                    mb([r.peak_rss for r in runs]),
                    each,
                ]
            )
        )
    return lines


@dataclass
class Target:
    what: str
    value: float | None  # measured ratio or value
    goal: float
    unit: str  # "x" for a ratio, else the value's unit
    at_most: bool = False  # the goal is an upper bound
    missing: str = ""

    def cells(self) -> list[str]:
        if self.value is None:
            return [self.what, "—", f"n/a ({self.missing})"]
        shown = (
            f"{self.value:.2f}{self.unit}" if self.unit == "x" else f"{self.value:.2f} {self.unit}"
        )
        ok = self.value < self.goal if self.at_most else self.value >= self.goal
        if ok:
            return [self.what, shown, "pass"]
        if self.at_most:
            over = (self.value / self.goal - 1) * 100
            by = f"{self.value - self.goal:.2f} {self.unit} ({over:.0f}% over the limit)"
        else:
            short = (1 - self.value / self.goal) * 100
            by = f"{short:.0f}% ({self.value / self.goal:.2f} of the target)"
        return [self.what, shown, f"**MISS** by {by}"]


def rps(results: Results, key: str | None, case: str, conns: int) -> float | None:
    if key is None:
        return None
    m = med_case(results, (key, case, conns))
    return m.rps if m else None


def ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def best_of(
    results: Results, keys: Sequence[str], case: str, conns: int
) -> tuple[str | None, float | None]:
    """The key with the highest median req/s in a case (the peer to beat)."""
    scored = [(v, k) for k in keys if (v := rps(results, k, case, conns)) is not None]
    if not scored:
        return None, None
    value, key = max(scored)
    return key, value


def targets(
    results: Results, specs: Sequence[ServerSpec], body_sizes: dict[str, int]
) -> list[Target]:
    mlservers = [s.key for s in specs if s.key.startswith("mlserver") and not s.ceiling]
    rest_ceiling = [s.key for s in specs if s.ceiling and REST_SMALL in s.cases]
    grpc_ceiling = [s.key for s in specs if s.ceiling and GRPC_SMALL in s.cases]
    me = "rosettaserve"
    out: list[Target] = []

    def versus(what: str, case: str, conns: int, keys: list[str], goal: float) -> Target:
        _, other = best_of(results, keys, case, conns)
        value = ratio(rps(results, me, case, conns), other)
        missing = "not measured" if other is None else "rosettaserve not measured"
        return Target(what, value, goal, "x", missing=missing)

    mls = "MLServer"
    out.append(versus(f"REST small, 16 conns: >= 6x {mls}", REST_SMALL, 16, mlservers, 6))
    out.append(
        versus("REST small, 16 conns: >= 80% of bare uvicorn", REST_SMALL, 16, rest_ceiling, 0.8)
    )
    out.append(versus(f"gRPC small, 16 conns: >= 1.6x {mls}", GRPC_SMALL, 16, mlservers, 1.6))
    out.append(
        versus("gRPC small, 16 conns: >= 80% of bare grpcio", GRPC_SMALL, 16, grpc_ceiling, 0.8)
    )
    out.append(versus(f"REST JSON 1 MiB: >= 3x {mls}", REST_JSON_1MIB, 4, mlservers, 3))
    binary = rps(results, me, REST_BINARY_1MIB, 4)
    size = body_sizes.get(f"{me}/{REST_BINARY_1MIB}")
    out.append(
        Target(
            "REST binary 1 MiB: >= 1 GB/s of request bytes",
            binary * size / 1e9 if binary and size else None,
            1.0,
            "GB/s",
            missing="not measured",
        )
    )
    out.append(versus(f"gRPC raw 1 MiB: >= 3x {mls}", GRPC_RAW_1MIB, 4, mlservers, 3))
    batched = rps(results, "rosettaserve-batching", "mlp_batched", BATCHING_CONNECTIONS)
    unbatched = rps(results, "rosettaserve-batching", "mlp_unbatched", BATCHING_CONNECTIONS)
    out.append(
        Target(
            "dynamic batching: batched >= 3x unbatched",
            ratio(batched, unbatched),
            3,
            "x",
            missing="not measured",
        )
    )
    startups = [
        r.startup for r in results.runs.get("rosettaserve-examples", []) if r.startup is not None
    ]
    out.append(
        Target(
            "startup to ready, tensor examples: < 1.5 s",
            median(startups) if startups else None,
            1.5,
            "s",
            at_most=True,
            missing="not measured",
        )
    )
    idle = [r.idle_rss for r in results.runs.get(me, []) if r.idle_rss is not None]
    out.append(
        Target(
            "idle RSS (identity server): < 150 MB",
            median(idle) / 1e6 if idle else None,
            150,
            "MB",
            at_most=True,
            missing="not measured",
        )
    )
    return out


def tool_versions() -> list[str]:
    def first_line(cmd: list[str]) -> str:
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        except OSError:
            return "missing"
        return (
            (proc.stdout + proc.stderr).strip().splitlines()[0]
            if proc.stdout + proc.stderr
            else "?"
        )

    packages = first_line(
        ["dpkg-query", "-W", "-f=${Package} ${Version}, ", "wrk", "nghttp2-client"]
    )
    import grpc

    return [
        f"wrk: `{first_line(['wrk', '-v'])}`",
        f"h2load: `{first_line(['h2load', '--version'])}`",
        f"Debian packages: {packages.rstrip(', ')}",
        f"driver: Python {platform.python_version()}, numpy {np.__version__}, "
        f"grpcio {grpc.__version__} (answer checks only)",
    ]


def machine() -> str:
    model = ""
    with contextlib.suppress(OSError):
        found = re.search(r"^model name\s*:\s*(.+)$", Path("/proc/cpuinfo").read_text(), re.M)
        model = found.group(1) if found else ""
    return f"{os.cpu_count()} CPUs ({model}), Linux {platform.release()}"


def loadavg() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def report(
    args: argparse.Namespace,
    specs: Sequence[ServerSpec],
    results: Results,
    body_sizes: dict[str, int],
    info: dict[str, str],
) -> str:
    lines = [
        "## rosettaserve vs MLServer and KServe (`bench/compare`)",
        "",
        "```",
        info["command"],
        "```",
        "",
        f"- date: {info['date']}; took {info['took']}",
        f"- machine: {machine()}; load average (1/5/15 min) {info['load_start']} at the start, "
        f"{info['load_end']} at the end",
        f"- servers pinned to CPU {args.server_cpu} (`taskset`), the load generator and this "
        f"driver to CPU {args.load_cpu}; one load generator thread",
        f"- each measurement: {args.warmup} s warm-up then {args.duration} s measured; "
        f"{args.repeats} repeats, each starting every server afresh (repeat 1 of every server, "
        "then repeat 2, …); the tables show medians over the repeats",
        "- REST: `wrk -t1 --latency --timeout 30s` (p50/p99 from wrk); gRPC: `h2load -t1 -m1` "
        "(p50/p99 from its per-request `--log-file`); the warm-up is a separate run of the same "
        "tool; each case's answer is checked once (output == input; status only for the "
        "constant-answer ceilings) before it is measured",
        f"- before every run the driver waits until the server's process tree is idle (under "
        f"{SETTLE_BUSY:.0%} of a core over {SETTLE_WINDOW} s), so requests still in flight when "
        "the previous run stopped are not served during the next one",
        *[f"- {v}" for v in tool_versions()],
    ]
    if info.get("peers_note"):
        lines.append(f"- **{info['peers_note']}**")
    lines += [
        "",
        "Servers:",
        "",
        row(["server", "key", "reports (GET /v2)", "notes"]),
        row(["---"] * 4),
    ]
    for spec in specs:
        versions = sorted({r.version for r in results.runs.get(spec.key, []) if r.version})
        lines.append(row([label(spec), spec.key, ", ".join(versions) or "—", spec.notes]))
    if REST_SMALL in args.cases:
        lines += ["", "### (a) FP32 [1,4], OIP REST JSON", ""]
        lines += small_table(results, specs, REST_SMALL)
    if GRPC_SMALL in args.cases:
        lines += ["", "### (b) FP32 [1,4], OIP gRPC ModelInfer (fp32_contents)", ""]
        lines += small_table(results, specs, GRPC_SMALL)
    large = [c for c in (REST_JSON_1MIB, REST_BINARY_1MIB, GRPC_RAW_1MIB) if c in args.cases]
    if large:
        lines += [
            "",
            "### (c) FP32 [1,262144] (1 MiB), 4 connections",
            "",
            "REST JSON: values in numpy's shortest float32 repr; REST binary: the binary tensor "
            "data extension both ways (`binary_data_output`); gRPC: `raw_input_contents`. "
            "request MB/s = req/s x request body bytes (10^6 B).",
            "",
            *large_table(results, specs, body_sizes, large),
        ]
    if BATCHING in info:
        lines += [
            "",
            f"### Dynamic batching, {BATCHING_CONNECTIONS} connections",
            "",
            info[BATCHING] + ".",
            "",
            row(["model", "req/s", "p50 ms", "p99 ms", "req/s each run", "errors", "mean batch"]),
            row(["---", "---:", "---:", "---:", "---", "---:", "---:"]),
        ]
        for model in rosetta.BATCHING_MODELS:
            cells = case_cells(results, BATCHING_VIEW, model, BATCHING_CONNECTIONS)
            sizes = results.batch_size.get(model, [])
            lines.append(row([model, *cells, fmt(median(sizes), 1) if sizes else "—"]))
    memory_specs = [*specs, *(s for s in (EXAMPLES_VIEW, BATCHING_VIEW) if s.key in results.runs)]
    lines += [
        "",
        "### Startup and memory",
        "",
        "Startup: spawn to the ready path answering 200 (to the gRPC port accepting a connection "
        "where the server has no HTTP port). RSS: VmRSS (idle: 1 s after ready) and VmHWM (peak, "
        "after the server's cases) summed over the server's process tree; MB = 10^6 bytes.",
        "",
        *memory_table(results, memory_specs),
        "",
        "### Targets",
        "",
        "Ratios of rosettaserve's medians to the same run's medians of the other server (the "
        "best MLServer configuration where there are several).",
        "",
        row(["target", "measured", "result"]),
        row(["---", "---:", "---"]),
        *(row(t.cells()) for t in targets(results, specs, body_sizes)),
    ]
    flagged = sorted(
        k for k, runs in results.cases.items() if any(m.errors or m.note for m in runs)
    )
    notes = [
        f"{s}/{c}/{n} conns: "
        + "; ".join(
            f"repeat {i}: {m.errors} errors" + (f" ({m.note})" if m.note else "")
            for i, m in enumerate(results.cases[(s, c, n)], 1)
            if m.errors or m.note
        )
        for s, c, n in flagged
    ]
    if flagged:
        lines += ["", "**Flagged runs** (errors, or no request completed):", ""]
        lines += [f"- {n}" for n in notes]
    failures = [f"- {s}/{c}/{n} conns: {'; '.join(w)}" for (s, c, n), w in results.failures.items()]
    if failures:
        lines += ["", "Failures:", "", *failures]
    return "\n".join(lines) + "\n"


def write_section(out: Path, section: str) -> None:
    block = f"{BEGIN}\n{section}{END}\n"
    text = out.read_text() if out.exists() else "# Benchmark results\n"
    if BEGIN in text and END in text:
        head, rest = text.split(BEGIN, 1)
        tail = rest.split(END, 1)[1].lstrip("\n")
        text = head + block + ("\n" + tail if tail else "")
    else:
        text = text.rstrip("\n") + "\n\n" + block
    out.write_text(text)


# -- main --------------------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--duration", type=int, default=10, help="seconds per measurement")
    parser.add_argument("--warmup", type=int, default=2, help="seconds of warm-up per case")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--servers", nargs="+", default=None, help="server keys (default: all)")
    parser.add_argument(
        "--cases", nargs="+", default=None, help=f"subset of {', '.join(ALL_CASES)} (default: all)"
    )
    parser.add_argument("--server-cpu", type=int, default=0)
    parser.add_argument("--load-cpu", type=int, default=1)
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "RESULTS.md")
    parser.add_argument("--raw-dir", type=Path, default=None, help="keep raw tool outputs here")
    args = parser.parse_args(argv)
    args.servers = split_list(args.servers)
    args.cases = split_list(args.cases) or list(ALL_CASES)
    unknown = set(args.cases) - set(ALL_CASES)
    if unknown:
        parser.error(f"unknown cases {sorted(unknown)}; known: {', '.join(ALL_CASES)}")
    return args


def split_list(values: list[str] | None) -> list[str] | None:
    if values is None:
        return None
    return [v for item in values for v in item.split(",") if v]


@contextlib.contextmanager
def raw_dir(path: Path | None) -> Iterator[Path]:
    if path is not None:
        path.mkdir(parents=True, exist_ok=True)
        yield path.resolve()
        return
    with tempfile.TemporaryDirectory(prefix="compare-raw-") as tmp:
        yield Path(tmp)


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    sys.path.insert(0, str(ROOT / "bench"))
    with contextlib.suppress(OSError):
        os.sched_setaffinity(0, {args.load_cpu})  # keep the driver off the server's core
    info = {
        "command": os.environ.get("COMPARE_COMMAND")
        or shlex.join(
            ["python", "bench/compare/driver.py", *(sys.argv[1:] if argv is None else argv)]
        ),
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "load_start": loadavg(),
    }
    began = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="compare-") as tmp, raw_dir(args.raw_dir) as raw:
        workdir = Path(tmp)
        specs, info["peers_note"] = all_specs(workdir)
        if info["peers_note"]:
            print(info["peers_note"], flush=True)
        if args.servers is not None:
            unknown = sorted(set(args.servers) - {s.key for s in specs})
            if unknown:
                print(f"unknown server keys {unknown}; known: {[s.key for s in specs]}")
            specs = [s for s in specs if s.key in args.servers]
        runs = [(c, n) for c, n in RUNS if c in args.cases]
        body_cache: dict[str, Body] = {}
        body_sizes: dict[str, int] = {}

        def bodies(spec: ServerSpec, case: str) -> Body:
            key = f"{spec.key}/{case}"
            if key not in body_cache:
                body_cache[key] = make_body(spec, case, workdir)
                body_sizes[key] = len(body_cache[key].data)
            return body_cache[key]

        load = Load(args.load_cpu, args.duration, args.warmup, raw)
        results = Results()
        examples = rosetta.examples_spec(workdir) if STARTUP in args.cases else None
        print(
            f"servers: {', '.join(s.key for s in specs)}; cases: {', '.join(args.cases)}; "
            f"raw outputs: {raw}",
            flush=True,
        )
        for repeat in range(1, args.repeats + 1):
            for spec in specs:
                spec_runs = [(c, n) for c, n in runs if c in spec.cases]
                measure_server(
                    spec, spec_runs, bodies, args, repeat=repeat, results=results, load=load
                )
            if BATCHING in args.cases:
                info[BATCHING] = measure_batching(args, workdir, repeat, results, load)
            if examples is not None:
                measure_startup(args, examples, repeat, results, load)
        info["load_end"] = loadavg()
        info["took"] = f"{(time.monotonic() - began) / 60:.1f} min"
        section = report(args, specs, results, body_sizes, info)
    print()
    print(section)
    write_section(args.out, section)
    print(f"written to {args.out} (between {BEGIN} and {END})")


if __name__ == "__main__":
    main()
