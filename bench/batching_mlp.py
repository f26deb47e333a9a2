"""Dynamic batching gain: an ONNX MLP served unbatched and batched, under the same load.

    .venv/bin/python bench/batching_mlp.py [--connections 32] [--duration 10] [--runs 3] [--hogs N]

Builds a repository in a temporary folder with the same MLP (--layers hidden layers of --hidden
units, --inputs features in, 16 out; fixed seed; ONNX Runtime with --intra-op-threads, one by
default, whose pool spins with --allow-spinning) served
twice: ``mlp_unbatched`` (max_batch_size 32, no dynamic batching: one execution per request) and
``mlp_batched`` (the same plus ``dynamic_batching`` with --delay-us). One server process is pinned
to --server-cpu; wrk (one thread, --connections keep-alive connections, one row per request,
OIP REST JSON or with --binary the binary tensor data extension) is pinned to --load-cpu.
Each run measures both models one after the other; the table shows medians over --runs of
req/s and wrk's p50/p99, and the mean batch size the server's statistics report.
With --hogs N, N busy-loop processes (bench/cpu_hog.py) are pinned to --server-cpu while wrk
runs: the server shares its core, as a pod under a CPU limit or beside a busy neighbour does.
Needs `wrk` and the `onnx` package (the dev extra).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import urllib.request
from pathlib import Path

import numpy as np
from cpu_hog import busy_loops
from served import start_ready

BIN = Path(sys.executable).parent
MODELS = ("mlp_unbatched", "mlp_batched")


def build_mlp(inputs: int, hidden: int, layers: int, outputs: int = 16) -> bytes:
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(20261121)
    dims = [inputs] + [hidden] * layers + [outputs]
    nodes, weights, prev = [], [], "INPUT0"
    for i, (a, b) in enumerate(itertools.pairwise(dims)):
        w = (rng.standard_normal((a, b)) / np.sqrt(a)).astype(np.float32)
        weights += [
            numpy_helper.from_array(w, f"W{i}"),
            numpy_helper.from_array(np.zeros(b, np.float32), f"B{i}"),
        ]
        last = i == len(dims) - 2
        nodes.append(
            helper.make_node("Gemm", [prev, f"W{i}", f"B{i}"], ["OUTPUT0" if last else f"G{i}"])
        )
        if not last:
            nodes.append(helper.make_node("Relu", [f"G{i}"], [f"H{i}"]))
            prev = f"H{i}"
    graph = helper.make_graph(
        nodes,
        "mlp",
        [helper.make_tensor_value_info("INPUT0", TensorProto.FLOAT, ["batch", inputs])],
        [helper.make_tensor_value_info("OUTPUT0", TensorProto.FLOAT, ["batch", outputs])],
        initializer=weights,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return bytes(model.SerializeToString())


def make_repo(root: Path, args: argparse.Namespace) -> None:
    graph = build_mlp(args.inputs, args.hidden, args.layers)
    common = "runtime: onnx\nmax_batch_size: 32\n"
    spin = ", allow_spinning: true" if args.allow_spinning else ""  # (off: the default)
    common += (
        f"parameters: {{intra_op_threads: {args.intra_op_threads}, inter_op_threads: 1{spin}}}\n"
    )
    batching = f"dynamic_batching: {{max_queue_delay_microseconds: {args.delay_us}}}\n"
    for name, extra in (("mlp_unbatched", ""), ("mlp_batched", batching)):
        (root / name / "1").mkdir(parents=True)
        (root / name / "1" / "model.onnx").write_bytes(graph)
        (root / name / "model.yaml").write_text(common + extra)


def start_server(repo: Path, args: argparse.Namespace) -> tuple[subprocess.Popen[str], str]:
    cmd = ["taskset", "-c", str(args.server_cpu), str(BIN / "rosettaserve"), "serve", str(repo)]
    cmd += ["--http-port", "0", "--grpc-port", "0", "--log-level", "warning"]
    return start_ready(cmd, tries=200)


def request_body(args: argparse.Namespace) -> tuple[bytes, dict[str, str]]:
    """One row of --inputs features: JSON, or (--binary) the binary tensor data extension."""
    row = np.random.default_rng(1).random(args.inputs).astype(np.float32).round(4)
    tensor: dict[str, object] = {"name": "INPUT0", "datatype": "FP32", "shape": [1, args.inputs]}
    if not args.binary:
        body = json.dumps({"inputs": [{**tensor, "data": row.tolist()}]}).encode()
        return body, {"Content-Type": "application/json"}
    tensor["parameters"] = {"binary_data_size": row.nbytes}
    header = json.dumps({"inputs": [tensor]}).encode()
    headers = {
        "Content-Type": "application/octet-stream",
        "Inference-Header-Content-Length": str(len(header)),
    }
    return header + row.tobytes(), headers


def post(url: str, body: bytes, headers: dict[str, str]) -> dict[str, object]:
    req = urllib.request.Request(url, body, headers)
    with urllib.request.urlopen(req) as r:
        answer: dict[str, object] = json.loads(r.read())
    return answer


def check_same_answers(url: str, body: bytes, headers: dict[str, str]) -> None:
    a, b = (post(f"{url}/v2/models/{m}/infer", body, headers)["outputs"] for m in MODELS)
    if a[0]["data"] != b[0]["data"]:  # type: ignore[index]
        raise RuntimeError("batched and unbatched models answer differently")


def wrk(
    url: str, model: str, script: Path, args: argparse.Namespace, seconds: float
) -> dict[str, float]:
    cmd = ["taskset", "-c", str(args.load_cpu), "wrk", "-t1", f"-c{args.connections}"]
    cmd += [
        f"-d{max(1, round(seconds))}s",
        "--latency",
        "-s",
        str(script),
        f"{url}/v2/models/{model}/infer",
    ]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    if "Non-2xx" in out or "Socket errors" in out:
        raise RuntimeError(out)
    return {
        "requests": float(re.search(r"(\d+) requests in", out).group(1)),  # type: ignore[union-attr]
        "rps": float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1)),  # type: ignore[union-attr]
        "p50": to_ms(re.search(r"^\s+50%\s+(\S+)", out, re.M).group(1)),  # type: ignore[union-attr]
        "p99": to_ms(re.search(r"^\s+99%\s+(\S+)", out, re.M).group(1)),  # type: ignore[union-attr]
    }


def cpu_seconds(pid: int) -> float:
    """The CPU time process ``pid`` has used (user + system, every thread: ONNX Runtime's too)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def to_ms(value: str) -> float:
    num, unit = re.fullmatch(r"([\d.]+)(us|ms|s)", value).groups()  # type: ignore[union-attr]
    return float(num) * {"us": 1e-3, "ms": 1.0, "s": 1e3}[unit]


def mean_batch(url: str, model: str) -> float:
    with urllib.request.urlopen(f"{url}/v2/models/{model}/stats") as r:
        stats = json.loads(r.read())["model_stats"][0]
    return float(stats["inference_count"] / max(1, stats["execution_count"]))


def build_parser() -> argparse.ArgumentParser:
    """The CLI's options; ``build_parser().parse_args([])`` gives the defaults (bench/compare)."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--duration", type=float, default=10.0)
    parser.add_argument("--warmup", type=float, default=3.0)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--inputs", type=int, default=128)
    parser.add_argument("--hidden", type=int, default=1024)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--delay-us", type=int, default=0)
    parser.add_argument("--intra-op-threads", type=int, default=1, help="ONNX Runtime's")
    parser.add_argument(
        "--allow-spinning", action="store_true", help="ONNX Runtime's pool threads spin"
    )
    parser.add_argument("--binary", action="store_true", help="binary tensor data, not JSON")
    parser.add_argument("--server-cpu", type=int, default=0)
    parser.add_argument("--load-cpu", type=int, default=1)
    parser.add_argument(
        "--hogs", type=int, default=0, help="busy-loop processes on --server-cpu during the runs"
    )
    return parser


def main() -> None:
    args = build_parser().parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        make_repo(root / "repo", args)
        body, headers = request_body(args)
        (root / "body.bin").write_bytes(body)
        script = root / "post.lua"
        lines = [
            f'local f = assert(io.open("{root / "body.bin"}", "rb"))',
            'wrk.body = f:read("*a")',
        ]
        lines += ["f:close()", 'wrk.method = "POST"']
        lines += [f'wrk.headers["{k}"] = "{v}"' for k, v in headers.items()]
        script.write_text("\n".join(lines) + "\n")
        proc, url = start_server(root / "repo", args)
        try:
            check_same_answers(url, body, headers)
            with busy_loops(args.server_cpu, args.hogs):
                results = measure(url, script, args, proc.pid)
        finally:
            proc.terminate()
            proc.wait()
    report(results, args)


def measure(
    url: str, script: Path, args: argparse.Namespace, pid: int
) -> dict[str, list[dict[str, float]]]:
    """wrk's figures for each run, and the server's CPU µs per request (``cpu_us``): on a host
    shared with other work, req/s falls with the CPU the server gets, its CPU time per request
    much less."""
    results: dict[str, list[dict[str, float]]] = {m: [] for m in MODELS}
    for model in MODELS:
        wrk(url, model, script, args, args.warmup)
    for run in range(args.runs):
        for model in MODELS:
            cpu = cpu_seconds(pid)
            result = wrk(url, model, script, args, args.duration)
            result["cpu_us"] = (cpu_seconds(pid) - cpu) / result["requests"] * 1e6
            results[model].append(result)
            print(f"run {run + 1} {model}: {result}", file=sys.stderr)
    for model in MODELS:
        results[model].append({"batch": mean_batch(url, model)})
    return results


def report(results: dict[str, list[dict[str, float]]], args: argparse.Namespace) -> None:
    print(
        f"MLP {args.inputs}->{'->'.join([str(args.hidden)] * args.layers)}->16 FP32, "
        f"{args.connections} connections, {args.duration:g} s x {args.runs} runs, "
        f"max_queue_delay {args.delay_us} us, {'binary' if args.binary else 'JSON'} requests"
        f"{f', {args.hogs} busy loop(s) on the server core' if args.hogs else ''}, "
        f"{args.intra_op_threads} intra-op thread(s){' spinning' if args.allow_spinning else ''}\n"
    )
    print("| model | req/s | p50 ms | p99 ms | server CPU us/req | mean batch | req/s of runs |")
    print("|---|---|---|---|---|---|---|")
    medians = {}
    for model, rows in results.items():
        runs, batch = rows[:-1], rows[-1]["batch"]
        med = {k: statistics.median(r[k] for r in runs) for k in ("rps", "p50", "p99", "cpu_us")}
        medians[model] = med["rps"]
        each = ", ".join(f"{r['rps']:.0f}" for r in runs)
        print(
            f"| {model} | {med['rps']:.0f} | {med['p50']:.2f} | {med['p99']:.2f} | "
            f"{med['cpu_us']:.1f} | {batch:.1f} | {each} |"
        )
    print(f"\nbatched / unbatched: {medians['mlp_batched'] / medians['mlp_unbatched']:.2f}x")


if __name__ == "__main__":
    main()
