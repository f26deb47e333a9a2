"""LLM load generator with vLLM ``benchmark_serving`` metrics, over OpenAI /v1/completions (SSE).

    python bench/llm_bench.py --url http://127.0.0.1:8000 --model tiny_llama \\
        --num-prompts 64 --output-len 64 --concurrency 1,16 --request-rate inf,50

For each load setting it reports completed/failed requests, request and output-token
throughput, and mean/median/p90/p99 of TTFT, TPOT, ITL and end-to-end latency (ms):
  TTFT  time to the first chunk carrying text
  TPOT  (latency - TTFT) / (output tokens - 1) per request (0 for one-token outputs)
  ITL   every gap between consecutive text chunks
A finite ``--request-rate`` sends requests as a Poisson process (exponential gaps, seeded);
``inf`` sends them all at once. ``--concurrency`` caps requests in flight. ``ignore_eos`` keeps
every output at ``--output-len`` tokens; ``--repeat N`` shows the best of N runs per setting
(for a shared machine). The client speaks HTTP/1.1 on raw asyncio streams so
that it costs the (shared) CPU as little as possible.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

import orjson

CORPUS = Path(__file__).resolve().parent.parent / "examples" / "llm" / "corpus.txt"


@dataclass
class Result:
    ok: bool = False
    ttft: float = 0.0
    latency: float = 0.0
    itl: list[float] = field(default_factory=list)
    output_tokens: int = 0
    prompt_tokens: int = 0
    error: str = ""


async def read_chunks(reader: asyncio.StreamReader):  # type: ignore[no-untyped-def]
    """Yield the chunks of a chunked HTTP/1.1 body (the server sends one SSE event per chunk)."""
    while True:
        size = int((await reader.readline()).strip(), 16)
        if size == 0:
            await reader.readline()
            return
        chunk = await reader.readexactly(size)
        await reader.readexactly(2)
        yield chunk


async def one_request(host: str, port: int, body: bytes) -> Result:
    result = Result()
    start = time.perf_counter()
    reader, writer = await asyncio.open_connection(host, port)
    try:
        head = (
            f"POST /v1/completions HTTP/1.1\r\nhost: {host}\r\ncontent-type: application/json\r\n"
            f"content-length: {len(body)}\r\nconnection: close\r\n\r\n"
        ).encode()
        writer.write(head + body)
        status = (await reader.readline()).split()[1]
        while (await reader.readline()) not in (b"\r\n", b""):
            pass
        if status != b"200":
            result.error = (await reader.read()).decode(errors="replace")[:200]
            return result
        last = start
        buffer = b""
        async for chunk in read_chunks(reader):
            buffer += chunk
            while b"\n\n" in buffer:
                event, buffer = buffer.split(b"\n\n", 1)
                payload = event.removeprefix(b"data: ")
                if payload == b"[DONE]":
                    result.ok = True
                    continue
                doc = orjson.loads(payload)
                if doc.get("usage"):
                    result.output_tokens = doc["usage"]["completion_tokens"]
                    result.prompt_tokens = doc["usage"]["prompt_tokens"]
                if doc.get("choices") and doc["choices"][0].get("text"):
                    now = time.perf_counter()
                    if result.ttft == 0.0:
                        result.ttft = now - start
                    else:
                        result.itl.append(now - last)
                    last = now
        result.latency = time.perf_counter() - start
    finally:
        writer.close()
    return result


def prompts(n: int, words: int, seed: int) -> list[str]:
    text = CORPUS.read_text(encoding="utf-8").split()
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        start = rng.randrange(0, len(text) - words)
        out.append(" ".join(text[start : start + words]))
    return out


async def run_load(args: argparse.Namespace, rate: float, concurrency: int) -> dict[str, float]:
    url = urlsplit(args.url)
    host, port = url.hostname or "127.0.0.1", url.port or 80
    gate = asyncio.Semaphore(concurrency)
    rng = random.Random(args.seed)

    async def send(prompt: str) -> Result:
        body = orjson.dumps(
            {
                "model": args.model,
                "prompt": prompt,
                "max_tokens": args.output_len,
                "temperature": 0,
                "ignore_eos": True,
                "stream": True,
                "stream_options": {"include_usage": True},
            }
        )
        async with gate:
            try:
                return await one_request(host, port, body)
            except (OSError, ValueError, asyncio.IncompleteReadError) as exc:
                return Result(error=repr(exc))

    tasks = []
    start = time.perf_counter()
    for prompt in prompts(args.num_prompts, args.input_len, args.seed):
        tasks.append(asyncio.create_task(send(prompt)))
        if rate != float("inf"):
            await asyncio.sleep(rng.expovariate(rate))
    results = await asyncio.gather(*tasks)
    return metrics(results, time.perf_counter() - start)


def pct(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]


def metrics(results: list[Result], duration: float) -> dict[str, float]:
    done = [r for r in results if r.ok]
    out: dict[str, float] = {
        "completed": len(done),
        "failed": len(results) - len(done),
        "duration_s": duration,
        "request_throughput": len(done) / duration,
        "output_throughput": sum(r.output_tokens for r in done) / duration,
    }
    series = {
        "ttft": [r.ttft * 1000 for r in done],
        "tpot": [
            (r.latency - r.ttft) / (r.output_tokens - 1) * 1000 if r.output_tokens > 1 else 0.0
            for r in done
        ],
        "itl": [gap * 1000 for r in done for gap in r.itl],
        "e2el": [r.latency * 1000 for r in done],
    }
    for name, values in series.items():
        out[f"{name}_mean"] = statistics.fmean(values) if values else 0.0
        for q in (50, 90, 99):
            out[f"{name}_p{q}"] = pct(values, q)
    errors = {r.error for r in results if r.error}
    if errors:
        print("errors:", *sorted(errors)[:3], sep="\n  ")
    return out


def row(label: str, m: dict[str, float]) -> str:
    cells = [
        label,
        f"{m['completed']:.0f}/{m['completed'] + m['failed']:.0f}",
        f"{m['request_throughput']:.1f}",
        f"{m['output_throughput']:.0f}",
        *(f"{m[f'{k}_p50']:.1f} / {m[f'{k}_p99']:.1f}" for k in ("ttft", "tpot", "itl", "e2el")),
    ]
    return "| " + " | ".join(cells) + " |"


HEADER = (
    "| load | ok | req/s | out tok/s | TTFT p50/p99 ms | TPOT p50/p99 ms | "
    "ITL p50/p99 ms | E2EL p50/p99 ms |\n|---|---|---|---|---|---|---|---|"
)


async def best_of(args: argparse.Namespace, rate: float, concurrency: int) -> dict[str, float]:
    """The run with the highest output throughput of ``--repeat`` (the machine may be shared)."""
    runs = [await run_load(args, rate, concurrency) for _ in range(args.repeat)]
    return max(runs, key=lambda m: m["output_throughput"])


async def main(args: argparse.Namespace) -> None:
    await run_load(args, float("inf"), 4)  # warm-up
    print(HEADER)
    for concurrency in [int(c) for c in args.concurrency.split(",")]:
        m = await best_of(args, float("inf"), concurrency)
        print(row(f"{concurrency} concurrent", m), flush=True)
    for rate in [float(r) for r in args.request_rate.split(",") if r]:
        m = await best_of(args, rate, args.num_prompts)
        print(row(f"{rate:g} req/s Poisson", m), flush=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--url", default="http://127.0.0.1:8000")
    parser.add_argument("--model", default="tiny_llama")
    parser.add_argument("--num-prompts", type=int, default=64)
    parser.add_argument("--input-len", type=int, default=8, help="prompt length in words")
    parser.add_argument("--output-len", type=int, default=64)
    parser.add_argument("--concurrency", default="1,4,16", help="comma-separated caps (inf rate)")
    parser.add_argument("--request-rate", default="", help="comma-separated Poisson rates")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--repeat", type=int, default=1, help="runs per setting; the best is shown")
    asyncio.run(main(parser.parse_args()))
