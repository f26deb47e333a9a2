"""Cache-aware prefill routing: a multi-turn chat through the PD scheduler with two prefill
instances, routed by load alone (``--policy load``) and by load and prompt prefix
(``--policy prefix``): time to first token of the later turns, and the prompt tokens the prefill
instances computed against those their prefix caches supplied.

    python bench/pd_prefix_bench.py --repeat 3

Setup (one policy at a time): prefill instances on core 0 and core 1, the decode instance and
the scheduler on core 1 (taskset), the tiny Llama with ``max_model_len: 4096``. Workload:
``--conversations`` chats run at once, each ``--turns`` turns in a row; a turn sends the whole
conversation so far (a long system prompt, the earlier turns with the model's greedy answers,
a new question from the bundled text) as a streamed chat completion of ``--answer`` tokens. The
figures are medians over ``--repeat`` runs: TTFT median and p90 over turns 2 and later, and the
prefix cache's share of the prompt tokens (the prefill instances' own counters, /status.json).
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import statistics
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import orjson
from llm_bench import pct, read_chunks  # type: ignore[import-not-found]
from pd_bench import CORPUS, MODEL, Proc, wait_ready  # type: ignore[import-not-found]

SYSTEM = "You are a helpful storyteller who answers in the style of an old sailor. " * 12


def questions(count: int, seed: int) -> list[str]:
    words = CORPUS.read_text(encoding="utf-8").split()
    start = (seed * 131) % len(words)
    text = (words[start:] + words) * 2
    return [" ".join(text[i * 60 : i * 60 + 60]) + "?" for i in range(count)]


def start(policy: str, repo: Path, logs: Path) -> tuple[str, list[Proc], list[str]]:
    serve = ["serve", str(repo), "--grpc-port", "0", "--log-level", "warning"]
    peers = ["--peer-allow", "127.0.0.1"]
    p1 = Proc([*serve, "--role", "prefill", *peers], {0}, logs / f"{policy}-p1.log")
    p2 = Proc([*serve, "--role", "prefill", *peers], {1}, logs / f"{policy}-p2.log")
    d = Proc([*serve, "--role", "decode", *peers], {1}, logs / f"{policy}-d.log")
    for proc in (p1, p2, d):
        wait_ready(proc.wait_url())
    command = ["scheduler", "--prefill", p1.url, "--prefill", p2.url, "--decode", d.url]
    s = Proc(
        [*command, "--policy", policy, "--log-level", "warning"], {1}, logs / f"{policy}-s.log"
    )
    wait_ready(s.wait_url())
    return s.url, [s, p1, p2, d], [p1.url, p2.url]


def cache_counts(urls: list[str]) -> tuple[int, int]:
    """(prompt tokens computed, prompt tokens from the prefix cache), summed over instances."""
    computed = hit = 0
    for url in urls:
        with urllib.request.urlopen(url + "/status.json", timeout=10) as r:
            doc = orjson.loads(r.read())
        for model in doc["models"]:  # (one entry a version)
            llm = model.get("llm") or {}
            computed += llm.get("prefill_tokens") or 0
            hit += llm.get("prefix_hit_tokens") or 0
    return computed, hit


async def turn(host: str, port: int, messages: list[dict[str, str]], answer: int) -> Any:
    """One streamed chat turn: (TTFT in seconds, the answer's text)."""
    doc = {"model": "tiny_llama", "messages": messages, "max_tokens": answer, "stream": True,
           "temperature": 0, "ignore_eos": True}  # fmt: skip
    data = orjson.dumps(doc)
    start = time.perf_counter()
    reader, writer = await asyncio.open_connection(host, port)
    first, text = 0.0, []
    try:
        head = (
            f"POST /v1/chat/completions HTTP/1.1\r\nhost: {host}\r\ncontent-type: "
            f"application/json\r\ncontent-length: {len(data)}\r\nconnection: close\r\n\r\n"
        )
        writer.write(head.encode() + data)
        status = (await reader.readline()).split()[1]
        while (await reader.readline()) not in (b"\r\n", b""):
            pass
        if status != b"200":
            raise RuntimeError((await reader.read()).decode(errors="replace")[:300])
        async for chunk in read_chunks(reader):
            for line in chunk.split(b"\n"):
                if not line.startswith(b"data: {"):
                    continue
                choices = orjson.loads(line[6:]).get("choices") or []
                piece = choices[0]["delta"].get("content") if choices else None
                if piece:
                    first = first or time.perf_counter() - start
                    text.append(piece)
    finally:
        writer.close()
    return first, "".join(text)


async def workload(url: str, args: argparse.Namespace, seed: int) -> list[float]:
    host, port = url.removeprefix("http://").rsplit(":", 1)

    async def chat(c: int) -> list[float]:
        messages = [{"role": "system", "content": SYSTEM}]
        ttfts = []
        for t, question in enumerate(questions(args.turns, seed * 100 + c)):
            messages.append({"role": "user", "content": question})
            ttft, answer = await turn(host, int(port), messages, args.answer)
            messages.append({"role": "assistant", "content": answer})
            if t > 0:
                ttfts.append(ttft)
        return ttfts

    runs = await asyncio.gather(*(chat(c) for c in range(args.conversations)))
    return [x for run in runs for x in run]


def main(args: argparse.Namespace) -> None:
    rows = {}
    with tempfile.TemporaryDirectory() as tmp:
        repo, logs = Path(tmp) / "repo", Path(args.logs or tmp)
        logs.mkdir(parents=True, exist_ok=True)
        shutil.copytree(MODEL, repo / "tiny_llama")
        (repo / "tiny_llama" / "model.yaml").write_text(
            "runtime: llm\nparameters: {threads: 1, max_model_len: 4096}\n"
        )
        for policy in args.policies.split(","):
            url, procs, prefills = start(policy, repo, logs)
            try:
                asyncio.run(workload(url, args, seed=999))  # warm-up (other conversations)
                figures = []
                for r in range(args.repeat):
                    before = cache_counts(prefills)
                    ttfts = asyncio.run(workload(url, args, seed=r))
                    after = cache_counts(prefills)
                    computed, hit = after[0] - before[0], after[1] - before[1]
                    figure = {"ttft_p50_ms": 1000 * statistics.median(ttfts),
                              "ttft_p90_ms": 1000 * pct(ttfts, 90),
                              "cached_share": hit / max(1, computed + hit),
                              "computed_tokens": computed}  # fmt: skip
                    figures.append(figure)
                    print(policy, {k: round(v, 3) for k, v in figure.items()}, flush=True)
                rows[policy] = {k: statistics.median(f[k] for f in figures) for k in figures[0]}
            finally:
                for proc in procs:
                    proc.stop()
    print("| policy | TTFT p50 ms | TTFT p90 ms | prompt tokens from the cache | computed |")
    print("|---|---|---|---|---|")
    for policy, f in rows.items():
        print(f"| {policy} | {f['ttft_p50_ms']:.1f} | {f['ttft_p90_ms']:.1f} | "
              f"{100 * f['cached_share']:.0f}% | {f['computed_tokens']:.0f} |")  # fmt: skip


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--policies", default="load,prefix")
    parser.add_argument("--conversations", type=int, default=6)
    parser.add_argument("--turns", type=int, default=5)
    parser.add_argument("--answer", type=int, default=24, help="tokens of each answer")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--logs", default="", help="keep the servers' logs in this folder")
    main(parser.parse_args())
