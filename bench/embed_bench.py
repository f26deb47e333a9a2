"""Embedding requests/s at 1, 16 and 64 concurrent clients, against a server's OpenAI
``/v1/embeddings`` (or TEI's ``/embed``), beside sentence-transformers' ``encode`` in this
process on the same folder (the ceiling: no HTTP, no JSON, one batch of as many texts as there
are clients).

    python bench/embed_bench.py --url http://127.0.0.1:18700 --model tiny_embedder \\
        --folder examples/models/tiny_embedder --concurrency 1,16,64 --requests 640 \\
        --peer infinity=http://127.0.0.1:18710/embeddings  # another server on the folder

Each request embeds one text (``--words`` words of the bundled corpus, different per request). Every
setting is run ``--repeat`` times and the best shown (the machine is shared). The client is
raw asyncio HTTP/1.1, one kept-alive connection per concurrent client.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import orjson

CORPUS = Path(__file__).resolve().parent.parent / "examples" / "llm" / "corpus.txt"


def sentences(count: int, length: int) -> list[str]:
    words = CORPUS.read_text(encoding="utf-8").split()
    return [" ".join(words[(i * 7) % (len(words) - length) :][:length]) for i in range(count)]


def body(route: str, model: str, text: str) -> dict[str, Any]:
    if route == "tei":
        return {"inputs": text}
    return {"model": model, "input": text, "encoding_format": "float"}


async def post(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, head: str,
               payload: bytes) -> bytes:  # fmt: skip
    """One request on a kept-alive HTTP/1.1 connection; the answer's body (200 only)."""
    writer.write(f"{head}content-length: {len(payload)}\r\n\r\n".encode() + payload)
    status = (await reader.readline()).split()[1]
    length = 0
    while (line := await reader.readline()) not in (b"\r\n", b""):
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    answer = await reader.readexactly(length)
    if status != b"200":
        raise RuntimeError(answer[:200].decode(errors="replace"))
    return answer


async def server_rate(
    url: str, route: str, model: str, texts: list[str], clients: int, *, path: str = ""
) -> float:
    """Requests/s of ``clients`` connections sending ``texts`` one per request. The client is
    raw asyncio streams, not httpx: on a 2-core machine httpx's own cost per request capped the
    rate before the server did."""
    host, port = urlsplit(url).hostname or "127.0.0.1", urlsplit(url).port or 80
    path = path or ("/embed" if route == "tei" else "/v1/embeddings")
    head = f"POST {path} HTTP/1.1\r\nhost: {host}\r\ncontent-type: application/json\r\n"
    queue = list(reversed(texts))

    async def worker() -> None:
        reader, writer = await asyncio.open_connection(host, port)
        try:
            await post(reader, writer, head, orjson.dumps(body(route, model, "warm up")))
            await ready.wait()
            while queue:
                await post(reader, writer, head, orjson.dumps(body(route, model, queue.pop())))
        finally:
            writer.close()

    ready = asyncio.Event()
    tasks = [asyncio.create_task(worker()) for _ in range(clients)]
    await asyncio.sleep(0.5)  # every connection open and warm
    start = time.perf_counter()
    ready.set()
    await asyncio.gather(*tasks)
    return len(texts) / (time.perf_counter() - start)


def inprocess_rate(folder: str, texts: list[str], clients: int) -> float:
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(folder, device="cpu")
    model.encode(texts[:clients], batch_size=clients)
    start = time.perf_counter()
    for i in range(0, len(texts), clients):
        model.encode(texts[i : i + clients], batch_size=clients)
    return len(texts) / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", default="http://127.0.0.1:18700")
    parser.add_argument("--model", default="tiny_embedder")
    parser.add_argument("--route", choices=("openai", "tei"), default="openai")
    parser.add_argument(
        "--peer",
        action="append",
        default=[],
        help="NAME=URL of another OpenAI-style embeddings route, e.g. "
        "infinity=http://127.0.0.1:18710/embeddings (repeatable)",
    )
    parser.add_argument("--folder", default="", help="also sentence-transformers in-process")
    parser.add_argument("--concurrency", default="1,16,64")
    parser.add_argument("--requests", type=int, default=640)
    parser.add_argument(
        "--words",
        type=int,
        default=8,
        help="per text (vLLM's server refuses, not cuts, a text longer than the model reads)",
    )
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1, help="torch threads in-process")
    args = parser.parse_args()
    texts = sentences(args.requests, args.words)
    peers = dict(p.split("=", 1) for p in args.peer)
    if args.folder:
        import torch

        torch.set_num_threads(args.threads)
    names = ["rosettaserve", *peers, *(["in-process encode"] if args.folder else [])]
    print("| clients | " + " | ".join(f"{n} req/s" for n in names) + " | "
          + " | ".join(f"ours / {n}" for n in names[1:]) + " |")  # fmt: skip
    print("|---" * (1 + 2 * len(names) - 1) + "|")

    def best(url: str, clients: int) -> float:
        parts = urlsplit(url)
        base, path = f"{parts.scheme}://{parts.netloc}", parts.path
        runs = (
            asyncio.run(server_rate(base, args.route, args.model, texts, clients, path=path))
            for _ in range(args.repeat)
        )
        return max(runs)

    for clients in (int(c) for c in args.concurrency.split(",")):
        rates = [best(args.url, clients), *(best(url, clients) for url in peers.values())]
        if args.folder:
            rates.append(
                max(inprocess_rate(args.folder, texts, clients) for _ in range(args.repeat))
            )
        cells = [f"{r:.0f}" for r in rates] + [_ratio(rates[0], r) for r in rates[1:]]
        print(f"| {clients} | " + " | ".join(cells) + " |", flush=True)


def _ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}" if b else "-"


if __name__ == "__main__":
    main()
