"""Mixed vs prefill/decode disaggregated serving: does decode ITL stay flat while long prompts
arrive?

    python bench/pd_bench.py --repeat 3

It starts the servers itself, one setup at a time (nothing else of ours runs meanwhile):
  mixed-2core  one mixed instance allowed on cores 0 and 1 (the same hardware as PD)
  mixed-1core  one mixed instance on core 1
  pd           a prefill instance on core 0, a decode instance on core 1, the scheduler on
               core 0 (the prefill instance idles between prompts)
and runs the same workload on each: ``--streams`` long generations (short prompts, greedy,
``ignore_eos``, ``--gen-len`` tokens) start together; once they stream, ``--prompts`` requests
arrive every ``--interval`` seconds, each asking for ``--prompt-gen`` tokens, once with short
and once with long prompts (``--prompt-tokens``, default 8 and 480): the short-prompt run is
the same load without the long prefills, so the two runs of one setup tell what long prefills
do to ITL. ITL is measured on the long generations (gaps between text chunks,
those that end while long prompts are arriving or being served), TTFT on the long-prompt
requests. All requests are OpenAI /v1/completions streams. The client is this process (raw
asyncio HTTP), not pinned. The model serves with ``max_model_len: 4096`` so generations can
outlast the arrivals (the tiny model's text past its 512 positions is nonsense; its speed is
what matters here).
Each setup runs ``--repeat`` times; the table shows the median of each figure over the runs.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import orjson
from llm_bench import pct, read_chunks  # type: ignore[import-not-found]

ROOT = Path(__file__).resolve().parent.parent
MODEL = ROOT / "examples" / "models" / "tiny_llama"
CORPUS = ROOT / "examples" / "llm" / "corpus.txt"


def long_prompt(tokens: int, seed: int) -> str:
    """A prompt of exactly ``tokens`` tokens from the bundled text."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(MODEL, local_files_only=True)
    tokenizer.model_max_length = sys.maxsize  # only counting: no warning about the model's window
    words = CORPUS.read_text(encoding="utf-8").split()
    start = seed % len(words)
    text = " ".join((words[start:] + words) * 4)
    ids = tokenizer(text)["input_ids"][: tokens - 1]  # the BOS token comes back
    return str(tokenizer.decode(ids, skip_special_tokens=True))


class Proc:
    def __init__(self, args: list[str], cores: set[int], log: Path) -> None:
        self.log = log.open("w")
        cmd = [sys.executable, "-m", "rosettaserve", *args, "--http-port", "0"]
        self.proc = subprocess.Popen(
            cmd,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            env=dict(os.environ, PYTHONUNBUFFERED="1"),
            preexec_fn=lambda: os.sched_setaffinity(0, cores),  # noqa: PLW1509
        )
        self.path = log
        self.url = ""

    def wait_url(self, timeout: float = 120.0) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for line in self.path.read_text().splitlines():
                if line.startswith("http: "):
                    self.url = line.split(" ", 1)[1].strip()
                    return self.url
            if self.proc.poll() is not None:
                raise RuntimeError(self.path.read_text())
            time.sleep(0.1)
        raise RuntimeError(f"no address from {self.path}")

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


def wait_ready(url: str, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url + "/v2/health/ready", timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.1)
    raise RuntimeError(f"{url} never became ready")


def start(setup: str, repo: Path, logs: Path, scheduler_cores: set[int]) -> tuple[str, list[Proc]]:
    serve = ["serve", str(repo), "--grpc-port", "0", "--log-level", "warning"]
    if setup.startswith("mixed"):
        mixed = Proc(serve, {0, 1} if setup == "mixed-2core" else {1}, logs / f"{setup}.log")
        url = mixed.wait_url()
        wait_ready(url)
        return url, [mixed]
    peers = ["--peer-allow", "127.0.0.1"]  # each other, on ports known once they run
    p = Proc([*serve, "--role", "prefill", *peers], {0}, logs / "prefill.log")
    d = Proc([*serve, "--role", "decode", *peers], {1}, logs / "decode.log")
    for proc in (p, d):
        wait_ready(proc.wait_url())
    command = ["scheduler", "--prefill", p.url, "--decode", d.url, "--log-level", "warning"]
    s = Proc(command, scheduler_cores, logs / "scheduler.log")
    wait_ready(s.wait_url())
    return s.url, [s, p, d]


async def stream(host: str, port: int, data: bytes) -> list[float]:
    """Send one streaming completion; the times (perf_counter) of its text chunks, the
    request's start first."""
    times = [time.perf_counter()]
    reader, writer = await asyncio.open_connection(host, port)
    try:
        head = (
            f"POST /v1/completions HTTP/1.1\r\nhost: {host}\r\ncontent-type: application/json"
            f"\r\ncontent-length: {len(data)}\r\nconnection: close\r\n\r\n"
        )
        writer.write(head.encode() + data)
        status = (await reader.readline()).split()[1]
        while (await reader.readline()) not in (b"\r\n", b""):
            pass
        if status != b"200":
            raise RuntimeError((await reader.read()).decode(errors="replace")[:300])
        async for chunk in read_chunks(reader):
            if b'"text":"' in chunk and b'"text":""' not in chunk:
                times.append(time.perf_counter())
            if b'"error"' in chunk:
                raise RuntimeError(chunk.decode(errors="replace")[:300])
    finally:
        writer.close()
    return times


def body(prompt: str, max_tokens: int) -> bytes:
    doc = {"model": "tiny_llama", "prompt": prompt, "max_tokens": max_tokens, "stream": True}
    doc |= {"temperature": 0, "ignore_eos": True, "stream_options": {"include_usage": True}}
    return orjson.dumps(doc)


async def workload(url: str, args: argparse.Namespace, prompts: list[str]) -> dict[str, float]:
    host, port = url.removeprefix("http://").rsplit(":", 1)
    shorts = ["Once upon a time", "The quick brown", "The weather today", "Every morning"]
    gens = [
        asyncio.create_task(stream(host, int(port), body(shorts[i % 4], args.gen_len)))
        for i in range(args.streams)
    ]
    await asyncio.sleep(args.warmup)  # the long generations are streaming now
    longs = []
    for prompt in prompts:
        longs.append(asyncio.create_task(stream(host, int(port), body(prompt, args.prompt_gen))))
        await asyncio.sleep(args.interval)
    long_times: list[list[float]] = await asyncio.gather(*longs)
    gen_times: list[list[float]] = await asyncio.gather(*gens)
    start, end = long_times[0][0], max(t[-1] for t in long_times)
    window = [
        (b - a) * 1000 for t in gen_times for a, b in itertools.pairwise(t[1:]) if start <= b <= end
    ]
    if max(t[-1] for t in gen_times) < end:
        raise RuntimeError("the long generations ended before the long prompts: raise --gen-len")
    ttft = [(t[1] - t[0]) * 1000 for t in long_times]
    span = max(t[-1] for t in gen_times) - min(t[0] for t in gen_times)
    return {
        "itl_p50": pct(window, 50),
        "itl_p99": pct(window, 99),
        "itl_max": max(window),
        "ttft_p50": pct(ttft, 50),
        "ttft_p99": pct(ttft, 99),
        "gen_tps": sum(len(t) - 1 for t in gen_times) / span,
    }


def median_of(runs: list[dict[str, float]]) -> dict[str, float]:
    return {k: statistics.median(r[k] for r in runs) for k in runs[0]}


def main(args: argparse.Namespace) -> None:
    lengths = [int(n) for n in args.prompt_tokens.split(",")]
    prompts = {n: [long_prompt(n, seed=i * 37) for i in range(args.prompts)] for n in lengths}
    results: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        repo, logs = Path(tmp) / "repo", Path(args.logs or tmp)
        logs.mkdir(parents=True, exist_ok=True)
        shutil.copytree(MODEL, repo / "tiny_llama")
        params = "{threads: 1, max_model_len: 4096" + "".join(f", {p}" for p in args.param) + "}"
        (repo / "tiny_llama" / "model.yaml").write_text(f"runtime: llm\nparameters: {params}\n")
        for setup in args.setups.split(","):
            cores = {int(c) for c in args.scheduler_cores.split(",")}
            url, procs = start(setup, repo, logs, cores)
            try:
                asyncio.run(workload(url, args, prompts[lengths[-1]][:4]))  # warm-up
                for n in lengths:
                    runs = [
                        asyncio.run(workload(url, args, prompts[n])) for _ in range(args.repeat)
                    ]
                    results[f"{setup}, {n}-token prompts"] = median_of(runs)
                    row = {k: round(v, 2) for k, v in median_of(runs).items()}
                    each = [round(r["itl_p99"], 1) for r in runs]  # the spread, not just the median
                    print(setup, n, row, "itl_p99 each run:", each, flush=True)
            finally:
                for proc in procs:
                    proc.stop()
    print(table(results))


def table(results: dict[str, dict[str, float]]) -> str:
    keys = ["itl_p50", "itl_p99", "itl_max", "ttft_p50", "ttft_p99", "gen_tps"]
    head = (
        "| setup | ITL p50 ms | ITL p99 ms | ITL max ms | TTFT p50 ms | TTFT p99 ms | gen tok/s |"
    )
    lines = [head, "|---" * 7 + "|"]
    for setup, m in results.items():
        lines.append(f"| {setup} | " + " | ".join(f"{m[k]:.1f}" for k in keys) + " |")
    for name in [s for s in results if s.startswith("pd,")]:
        arrivals = name.split(", ", 1)[1]
        for base in [s for s in results if s.endswith(arrivals) and s != name]:
            ratio = [results[name][k] / results[base][k] for k in keys]
            label = f"pd / {base.split(',')[0]}, {arrivals}"
            lines.append(f"| {label} | " + " | ".join(f"{r:.2f}x" for r in ratio) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--setups", default="mixed-2core,mixed-1core,pd")
    parser.add_argument("--streams", type=int, default=8, help="long generations")
    parser.add_argument("--gen-len", type=int, default=1500, help="their output tokens")
    parser.add_argument("--prompts", type=int, default=16, help="long-prompt requests")
    parser.add_argument(
        "--prompt-tokens", default="8,480", help="prompt lengths of the arriving requests"
    )
    parser.add_argument("--prompt-gen", type=int, default=8, help="their output tokens")
    parser.add_argument("--interval", type=float, default=0.1, help="seconds between them")
    parser.add_argument("--warmup", type=float, default=0.3, help="before the first long prompt")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--logs", default="", help="keep the servers' logs in this folder")
    parser.add_argument("--scheduler-cores", default="1", help="cores the scheduler may use")
    parser.add_argument(
        "--param",
        action="append",
        default=[],
        help="one more model.yaml parameter, as 'name: value' (repeatable)",
    )
    main(parser.parse_args())
