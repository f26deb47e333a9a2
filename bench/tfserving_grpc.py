"""TF Serving gRPC Predict vs OIP gRPC ModelInfer on the same model, side by side in one run.

Run:  PYTHONPATH=src .venv/bin/python bench/tfserving_grpc.py [--duration 10] [--repeats 3]
      [--server-cpu 0] [--load-cpu 1]

One ``rosettaserve serve`` (bench/compare's ``identity`` model: python, FP32 [-1, -1], output =
input) pinned to one core, h2load (bench/compare's loadgen, one thread) pinned to another. Each
case sends one request message over and over, as the clients write it:

* small: FP32 [1, 4]. Predict: ``tf.make_tensor_proto``'s message (``tensor_content``, as it
  writes any array of more than one value); ModelInfer: ``fp32_contents`` (tritonclient's
  grpc_small case in bench/compare), and ``raw_input_contents`` too;
* 1 MiB: FP32 [1, 262144]. Predict: ``tensor_content``; ModelInfer: ``raw_input_contents``.

Each answer is checked once (the input comes back) before a warm-up run and a measured run per
connection count, every call in turn, --repeats times (medians reported): a busy spell on a
shared machine hits every call alike. The TensorProto is built here with the server's copy of
TensorFlow's own messages (protocols/tfserving/pb), so the script needs no TensorFlow.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import grpc
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench" / "compare"))

from bodies import Body  # noqa: E402
from loadgen import Load, h2load  # noqa: E402
from rosetta import identity_repo  # noqa: E402

from rosettaserve.protocols.oip.pb import grpc_service_pb2 as oip  # noqa: E402
from rosettaserve.protocols.tfserving import messages as tfs  # noqa: E402
from rosettaserve.protocols.tfserving import tensorproto  # noqa: E402

PREDICT = "/tensorflow.serving.PredictionService/Predict"
INFER = "/inference.GRPCInferenceService/ModelInfer"
SMALL, LARGE = (1, 4), (1, 262144)
# (case, connections): small at 1 and 16 connections, 1 MiB at 4 (bench/compare's counts)
RUNS = (("small", 1), ("small", 16), ("1mib", 4))


def tensor(shape: tuple[int, ...]) -> np.ndarray:
    return np.random.default_rng(20260801).standard_normal(shape).astype(np.float32)


def predict_message(data: np.ndarray) -> bytes:
    request = tfs.PredictRequest()
    request.model_spec.name = "identity"
    request.inputs["INPUT0"].CopyFrom(tensorproto.make(data, "FP32"))
    return bytes(request.SerializeToString())


def infer_message(data: np.ndarray, *, raw: bool) -> bytes:
    request = oip.ModelInferRequest(model_name="identity")
    item = request.inputs.add(name="INPUT0", datatype="FP32", shape=list(data.shape))
    if raw:
        request.raw_input_contents.append(data.tobytes())
    else:
        item.contents.fp32_contents.extend(data.reshape(-1).tolist())
    return bytes(request.SerializeToString())


def answer(channel: grpc.Channel, path: str, message: bytes, data: np.ndarray) -> int:
    """The size of the answer to ``message``, checked to hold ``data``."""
    call = channel.unary_unary(path)
    reply = call(message, timeout=30)
    if path == PREDICT:
        out = tfs.PredictResponse.FromString(reply).outputs["OUTPUT0"]
        got = tensorproto.to_array(out, "OUTPUT0")[1]
    else:
        got = np.frombuffer(oip.ModelInferResponse.FromString(reply).raw_output_contents[0], "<f4")
    if got.reshape(-1).tolist() != data.reshape(-1).tolist():
        raise SystemExit(f"{path}: the answer is not the input")
    return len(reply)


def start(repo: Path, cpu: int) -> tuple[subprocess.Popen[str], str]:
    exe = ROOT / ".venv" / "bin" / "rosettaserve"
    cmd = ["taskset", "-c", str(cpu), str(exe), "serve", str(repo), "--http-port", "0"]
    cmd += ["--grpc-port", "0", "--log-level", "warning"]
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"), PYTHONUNBUFFERED="1")
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env
    )
    assert proc.stdout is not None
    for line in proc.stdout:
        found = re.match(r"grpc: (?:grpc://)?(\S+)", line)
        if found:
            return proc, found.group(1)
    raise SystemExit("the server printed no gRPC address")


# the calls compared in each case: (label, path, message, the input the answer must hold)
Call = tuple[str, str, bytes, np.ndarray]
Measured = dict[tuple[str, int, str], list[tuple[Any, float]]]  # (measurement, CPU us a call)


def calls() -> dict[str, list[Call]]:
    small, large = tensor(SMALL), tensor(LARGE)
    return {
        "small": [
            ("TF Predict (tensor_content)", PREDICT, predict_message(small), small),
            ("OIP ModelInfer (fp32_contents)", INFER, infer_message(small, raw=False), small),
            ("OIP ModelInfer (raw)", INFER, infer_message(small, raw=True), small),
        ],
        "1mib": [
            ("TF Predict (tensor_content)", PREDICT, predict_message(large), large),
            ("OIP ModelInfer (raw)", INFER, infer_message(large, raw=True), large),
        ],
    }


def measure_all(load: Load, address: str, pid: int, repeats: int) -> Measured:
    """Every call of every run, each answer checked first, ``repeats`` times interleaved (a busy
    spell on a shared machine hits every call alike)."""
    cases = calls()
    measured: Measured = {}
    with grpc.insecure_channel(address, [("grpc.max_receive_message_length", 64 << 20)]) as ch:
        time.sleep(0.5)
        for repeat in range(repeats):
            for case, conns in RUNS:
                for label, path, message, data in cases[case]:
                    size = answer(ch, path, message, data)
                    tag = f"{case}-c{conns}-r{repeat}"
                    m, cpu = run(load, address, (path, message, size), tag, pid)
                    measured.setdefault((case, conns, label), []).append((m, cpu))
                    print(
                        f"  r{repeat} {case} c{conns} {label}: {m.rps:.0f} req/s, "
                        f"server CPU {cpu:.0f} us/call",
                        flush=True,
                    )
    return measured


def medians(
    measured: Measured,
) -> dict[tuple[str, int, str], tuple[float, float, float, float, int]]:
    """req/s, p50 ms, p99 ms, server CPU us a call (medians over the repeats) and the errors."""
    out = {}
    for key, runs in measured.items():
        ms = [m for m, _ in runs]
        rps, p50, p99 = (
            statistics.median(getattr(m, k) for m in ms) for k in ("rps", "p50", "p99")
        )
        cpu = statistics.median(c for _, c in runs)
        out[key] = (rps, p50, p99, cpu, sum(m.errors for m in ms))
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--duration", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--server-cpu", type=int, default=0)
    parser.add_argument("--load-cpu", type=int, default=1)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="tfgrpc_bench_"))
    proc, address = start(identity_repo(work), args.server_cpu)
    load = Load(args.load_cpu, args.duration, args.warmup, work)
    try:
        measured = measure_all(load, address, proc.pid, args.repeats)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    print(
        f"\n| case | conns | call | req/s (median of {args.repeats}) | p50 ms | p99 ms | "
        "server CPU us/call | errors |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for (case, conns, label), (rps, p50, p99, cpu, errors) in medians(measured).items():
        print(
            f"| {case} | {conns} | {label} | {rps:.0f} | {p50:.2f} | {p99:.2f} | {cpu:.0f} | "
            f"{errors} |"
        )


def cpu_seconds(pid: int) -> float:
    """The CPU time (user + system) the process has used: steadier than req/s when other work
    shares the machine, since only the server's own cycles count."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run(
    load: Load, address: str, call: tuple[str, bytes, int], tag: str, pid: int
) -> tuple[Any, float]:
    """A warm-up run and a measured run of one call: ``call`` is (path, message, answer size).
    Gives the measurement and the server's CPU microseconds per call in the measured run."""
    path, message, size = call
    tag = f"{tag}-{'tf' if path == PREDICT else 'oip'}-{len(message)}"
    frame = load.raw / f"{tag}.bin"
    frame.write_bytes(b"\x00" + len(message).to_bytes(4, "big") + message)
    headers = {"content-type": "application/grpc", "te": "trailers"}
    body = Body(frame, message, np.empty(0), headers)
    url = f"http://{address}{path}"
    conns = int(tag.split("-c")[1].split("-")[0])
    h2load(load, url, body, conns=conns, seconds=load.warmup, tag=tag + "-w", answer_size=size)
    before = cpu_seconds(pid)
    m = h2load(load, url, body, conns=conns, seconds=load.duration, tag=tag, answer_size=size)
    return m, (cpu_seconds(pid) - before) / max(m.requests, 1) * 1e6


if __name__ == "__main__":
    main()
