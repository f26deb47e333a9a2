"""Ollama's /api/chat against OpenAI's /v1/chat/completions on the same model: output tokens a
second at a number of concurrent streams, the two routes measured in turn (rounds alternated,
for a shared machine), greedy with the same messages, so both generate the same tokens.

    python bench/ollama_vs_openai.py --url http://127.0.0.1:8000 --model tiny_llama \\
        --streams 16 --requests 64 --max-tokens 64 --rounds 3

Reports each route's tokens/s per round (and the tokens generated: the same for both), their
medians and Ollama's cost against OpenAI (positive: Ollama slower). With ``--server-pid`` (a
server on this machine) it also reports the server's CPU time per output token (user + system,
from /proc): on a shared machine the steadier measure, as other load changes the wall time more
than the work done. The client speaks HTTP/1.1 on raw asyncio streams and reads each stream
whole (the same work for both routes: the chunks are not parsed, only the last one).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time
from pathlib import Path
from urllib.parse import urlsplit

import orjson

PROMPTS = [f"Tell me story number {i} about a river." for i in range(64)]


def body(route: str, model: str, prompt: str, max_tokens: int) -> bytes:
    messages = [{"role": "user", "content": prompt}]
    if route == "openai":
        return orjson.dumps({"model": model, "messages": messages, "stream": True,
                             "temperature": 0, "max_tokens": max_tokens,
                             "stream_options": {"include_usage": True}})  # fmt: skip
    return orjson.dumps({"model": model, "messages": messages, "stream": True,
                         "options": {"temperature": 0, "num_predict": max_tokens}})  # fmt: skip


def tokens_of(route: str, data: bytes) -> int:
    """The output tokens the stream's last chunk reports."""
    if route == "openai":
        events = [e for e in data.split(b"\n\n") if e.startswith(b"data: {")]
        usage = orjson.loads(events[-1][6:])["usage"]
        return int(usage["completion_tokens"])
    return int(orjson.loads(data.rstrip(b"\n").rsplit(b"\n", 1)[-1])["eval_count"])


async def one(host: str, port: int, path: str, payload: bytes) -> bytes:
    reader, writer = await asyncio.open_connection(host, port)
    try:
        writer.write(
            f"POST {path} HTTP/1.1\r\nhost: {host}\r\ncontent-type: application/json\r\n"
            f"content-length: {len(payload)}\r\nconnection: close\r\n\r\n".encode()
            + payload
        )
        raw = await reader.read(-1)
    finally:
        writer.close()
    head, _, chunked = raw.partition(b"\r\n\r\n")
    assert head.split()[1] == b"200", raw[:300]
    out, rest = [], chunked
    while rest:
        size_line, _, rest = rest.partition(b"\r\n")
        size = int(size_line, 16)
        if size == 0:
            break
        out.append(rest[:size])
        rest = rest[size + 2 :]
    return b"".join(out)


def cpu_seconds(pid: int) -> float:
    """The process's user + system CPU time so far (0 without a pid)."""
    if not pid:
        return 0.0
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def run(url: str, route: str, args: argparse.Namespace) -> tuple[float, int]:
    parts = urlsplit(url)
    host, port = parts.hostname or "127.0.0.1", parts.port or 80
    path = "/v1/chat/completions" if route == "openai" else "/api/chat"
    gate = asyncio.Semaphore(args.streams)
    total = 0

    async def request(prompt: str) -> None:
        nonlocal total
        async with gate:
            data = await one(host, port, path, body(route, args.model, prompt, args.max_tokens))
            total += tokens_of(route, data)

    start = time.perf_counter()
    await asyncio.gather(*(request(PROMPTS[i % len(PROMPTS)]) for i in range(args.requests)))
    return total / (time.perf_counter() - start), total


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--url", default="http://127.0.0.1:8000")
    ap.add_argument("--model", default="tiny_llama")
    ap.add_argument("--streams", type=int, default=16)
    ap.add_argument("--requests", type=int, default=64)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--server-pid", type=int, default=0)
    args = ap.parse_args()
    seen: dict[str, list[float]] = {"openai": [], "ollama": []}
    cpu: dict[str, list[float]] = {"openai": [], "ollama": []}  # server µs per output token
    asyncio.run(run(args.url, "openai", args))  # warm-up
    for r in range(args.rounds):
        for route in ("openai", "ollama") if r % 2 == 0 else ("ollama", "openai"):
            before = cpu_seconds(args.server_pid)
            rate, tokens = asyncio.run(run(args.url, route, args))
            cpu[route].append((cpu_seconds(args.server_pid) - before) / tokens * 1e6)
            seen[route].append(rate)
            print(
                f"round {r + 1} {route:7s} {rate:8.1f} tokens/s ({tokens} tokens), "
                f"server {cpu[route][-1]:.1f} µs CPU a token",
                flush=True,
            )
    medians = {k: statistics.median(v) for k, v in seen.items()}
    cost = (medians["openai"] - medians["ollama"]) / medians["openai"] * 100
    print(f"median  openai {medians['openai']:.1f}  ollama {medians['ollama']:.1f} tokens/s")
    print(f"ollama's cost against openai: {cost:+.1f}%")
    if args.server_pid:
        us = {k: statistics.median(v) for k, v in cpu.items()}
        extra = (us["ollama"] - us["openai"]) / us["openai"] * 100
        print(f"server CPU a token: openai {us['openai']:.1f} µs, ollama {us['ollama']:.1f} µs "
              f"({extra:+.1f}%)")  # fmt: skip


if __name__ == "__main__":
    main()
