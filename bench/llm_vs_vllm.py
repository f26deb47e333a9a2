"""LLM serving side by side with vLLM: one tiny model, three servers, back to back.

    python bench/llm_vs_vllm.py [--repeat 3] [--concurrency 1,16,32] [--output-len 64]

  vllm        vLLM's own OpenAI server (``python -m vllm.entrypoints.openai.api_server``)
  rosetta     rosettaserve with its own engine (``runtime: llm``)
  rosetta+vllm  rosettaserve with vLLM's engine (``runtime: vllm``)

The model is the head-size-32 tiny Llama (tests_vllm/build_model.py: vLLM's CPU attention
needs 32), float32 everywhere, at most 32 sequences together. vLLM runs from .venv-vllm (it
brings transformers 5), rosettaserve's engine from .venv. All three servers start first; then
for each concurrency every server takes its turn, ``--repeat`` rounds (A B C A B C ...), so a
busy machine disturbs them alike. Each run is ``bench/llm_bench.py``'s (streamed
/v1/completions, greedy, ``ignore_eos``, ``--output-len`` tokens); the table shows each
figure's median over the rounds.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

import llm_bench  # noqa: E402

from tests_vllm.build_model import DEFAULT_OUT, build  # noqa: E402

MAIN_PY = ROOT / ".venv" / "bin" / "python"
VLLM_PY = ROOT / ".venv-vllm" / "bin" / "python"
MODEL = "tiny_llama"
KV_BYTES = 256 << 20
MAX_SEQS = 32
START_TIMEOUT_S = 600.0
FIGURES = ("output_throughput", "ttft_p50", "ttft_p99", "itl_p50", "itl_p99")


def model_yaml(runtime: str) -> str:
    if runtime == "llm":
        return f"runtime: llm\nparameters: {{max_num_seqs: {MAX_SEQS}, threads: 1}}\n"
    return (
        f"runtime: vllm\nparameters: {{max_num_seqs: {MAX_SEQS}, "
        f"kv_cache_memory_bytes: {KV_BYTES}}}\n"
    )


def repository(root: Path, runtime: str, model: Path) -> Path:
    folder = root / runtime / MODEL
    folder.mkdir(parents=True)
    for path in model.iterdir():
        if path.name != "model.yaml":
            (folder / path.name).symlink_to(path.resolve())
    (folder / "model.yaml").write_text(model_yaml(runtime))
    return folder.parent


def commands(root: Path, model: Path, ports: dict[str, int]) -> dict[str, list[str]]:
    serve = ["-m", "rosettaserve", "serve", "--log-level", "warning", "--grpc-port", "0"]
    return {
        "vllm": [str(VLLM_PY), "-m", "vllm.entrypoints.openai.api_server", "--model",
                 str(model), "--served-model-name", MODEL, "--host", "127.0.0.1", "--port",
                 str(ports["vllm"]), "--dtype", "float32", "--max-num-seqs", str(MAX_SEQS),
                 "--kv-cache-memory-bytes", str(KV_BYTES), "--disable-log-stats"],
        "rosetta": [str(MAIN_PY), *serve, str(repository(root, "llm", model)),
                    "--http-port", str(ports["rosetta"])],
        "rosetta+vllm": [str(VLLM_PY), *serve, str(repository(root, "vllm", model)),
                         "--http-port", str(ports["rosetta+vllm"])],
    }  # fmt: skip


def ready(port: int, path: str) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=2) as r:
            return bool(r.status == 200)
    except OSError:
        return False


def start(name: str, cmd: list[str], port: int, log: Path) -> subprocess.Popen[bytes]:
    with log.open("w") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
    path = "/health" if name == "vllm" else "/v2/health/ready"
    deadline = time.monotonic() + START_TIMEOUT_S
    while not ready(port, path):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise SystemExit(f"{name} did not start:\n{log.read_text()[-3000:]}")
        time.sleep(0.5)
    return proc


def load_args(args: argparse.Namespace, port: int, concurrency: int) -> argparse.Namespace:
    return argparse.Namespace(
        url=f"http://127.0.0.1:{port}",
        model=MODEL,
        num_prompts=max(args.min_prompts, 4 * concurrency),
        input_len=args.input_len,
        output_len=args.output_len,
        seed=0,
    )


def free_ports(names: list[str]) -> dict[str, int]:
    import socket

    ports = {}
    for name in names:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            ports[name] = int(s.getsockname()[1])
    return ports


def measure(
    args: argparse.Namespace, ports: dict[str, int]
) -> dict[tuple[str, int], list[dict[str, float]]]:
    """Every (server, concurrency)'s runs, servers alternating within each round."""
    runs: dict[tuple[str, int], list[dict[str, float]]] = {}
    for port in ports.values():  # warm-up
        asyncio.run(llm_bench.run_load(load_args(args, port, 4), float("inf"), 4))
    for concurrency in [int(c) for c in args.concurrency.split(",")]:
        for _ in range(args.repeat):
            for name, port in ports.items():
                m = asyncio.run(
                    llm_bench.run_load(
                        load_args(args, port, concurrency), float("inf"), concurrency
                    )
                )
                if m["failed"]:
                    raise SystemExit(f"{name}: {m['failed']:.0f} requests failed")
                runs.setdefault((name, concurrency), []).append(m)
    return runs


def table(runs: dict[tuple[str, int], list[dict[str, float]]]) -> str:
    lines = [
        "| server | streams | out tok/s | TTFT p50 / p99 ms | ITL p50 / p99 ms | tok/s each run |",
        "|---|---:|---:|---:|---:|---|",
    ]
    for (name, concurrency), ms in runs.items():
        med = {k: statistics.median(m[k] for m in ms) for k in FIGURES}
        each = ", ".join(f"{m['output_throughput']:.0f}" for m in ms)
        lines.append(
            f"| {name} | {concurrency} | {med['output_throughput']:,.0f} | "
            f"{med['ttft_p50']:.1f} / {med['ttft_p99']:.1f} | "
            f"{med['itl_p50']:.1f} / {med['itl_p99']:.1f} | {each} |"
        )
    return "\n".join(lines)


def host() -> str:
    cpus = os.cpu_count()
    model = next(
        (ln.split(":", 1)[1].strip() for ln in Path("/proc/cpuinfo").read_text().splitlines()
         if ln.startswith("model name")), "?")  # fmt: skip
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    return f"{cpus} CPUs ({model}), Linux {platform.release()}; load average {load}"


def main(args: argparse.Namespace) -> None:
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))  # the servers stop with the driver
    model = build(Path(args.model_dir))
    names = ["vllm", "rosetta", "rosetta+vllm"]
    ports = free_ports(names)
    root = Path(tempfile.mkdtemp(prefix="llm_vs_vllm_"))
    procs: list[subprocess.Popen[bytes]] = []
    try:
        cmds = commands(root, model, ports)
        for name in names:
            began = time.monotonic()
            procs.append(start(name, cmds[name], ports[name], root / f"{name}.log"))
            print(f"{name}: ready in {time.monotonic() - began:.1f} s", flush=True)
        print(f"host: {host()}", flush=True)
        print(table(measure(args, ports)))
        print(f"host after: {host()}")
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--model-dir", default=str(DEFAULT_OUT))
    parser.add_argument("--concurrency", default="1,16,32")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--output-len", type=int, default=64)
    parser.add_argument("--input-len", type=int, default=8, help="prompt length in words")
    parser.add_argument("--min-prompts", type=int, default=32)
    main(parser.parse_args())
