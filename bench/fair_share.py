"""Fair share between API keys: a quiet key's p99 alone, and while another key floods.

    flock /work/scratch/bench.lock .venv/bin/python bench/fair_share.py \\
        [--tree DIR] [--runs 3] [--duration 10] [--rate 140] [--flood-connections 256]

One server process (pinned to --server-cpu) serves a batched model whose batch costs the same
whatever its size (--batch-ms of sleep per batch, up to 32 rows: as an accelerator's batch
does; the event loop stays free while it runs), behind two API keys of weight 1. The load
generator (one asyncio process, pinned to --load-cpu, raw HTTP/1.1 keep-alive connections, OIP
REST JSON, one row a request) runs two cases:
  - ``alone``: key B alone, open loop at --rate requests/s (a request is timed from when it was
    due, so a late send counts: no coordinated omission), on up to 32 connections;
  - ``flood``: the same B, while key A floods: --flood-connections connections each sending its
    next request as soon as its answer is in (A's rate is printed: at least 10x B's).
B's p50 and p99 are taken over --duration seconds after --warmup; the table shows the medians
over --runs (runs interleaved: alone, flood, alone, flood...). --tree picks the source tree the
server runs (PYTHONPATH: its src/), to compare a tree that serves first come first served.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from served import start_ready

BIN = Path(sys.executable).parent
KEYS = {"A": "key-a-flooding", "B": "key-b-quiet"}
MODEL = '''
import time

from rosettaserve import Model


class FixedCost(Model):
    """Each batch takes the same time whatever its rows (an accelerator's batch)."""

    def predict(self, inputs):
        time.sleep(self.config["parameters"]["batch_ms"] / 1000)
        return {"OUTPUT0": inputs["INPUT0"] * 2}
'''


def make_repo(root: Path, batch_ms: float) -> None:
    model = root / "fixed" / "1"
    model.mkdir(parents=True)
    (model / "model.py").write_text(MODEL)
    (root / "fixed" / "model.yaml").write_text(
        "runtime: python\nclass: FixedCost\nmax_batch_size: 32\ndynamic_batching: {}\n"
        "inputs:\n  - {name: INPUT0, datatype: FP32, shape: [-1, 4]}\n"
        "outputs:\n  - {name: OUTPUT0, datatype: FP32, shape: [-1, 4]}\n"
        f"parameters: {{batch_ms: {batch_ms}}}\n"
    )


def start_server(
    repo: Path, keys: Path, args: argparse.Namespace
) -> tuple[subprocess.Popen[str], str]:
    cmd = ["taskset", "-c", str(args.server_cpu), sys.executable, "-m", "rosettaserve", "serve"]
    cmd += [str(repo), "--http-port", "0", "--grpc-port", "0", "--log-level", "warning"]
    cmd += ["--api-key-file", str(keys)]
    env = {**os.environ, "PYTHONPATH": str(Path(args.tree).resolve() / "src")}
    return start_ready(cmd, env)


def request_bytes(host: str, key: str) -> bytes:
    body = json.dumps(
        {"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1, 4], "data": [1, 2, 3, 4]}]}
    ).encode()
    head = (
        f"POST /v2/models/fixed/infer HTTP/1.1\r\nHost: {host}\r\nx-api-key: {key}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


class Conn:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    async def call(self, request: bytes) -> None:
        self.writer.write(request)
        head = await self.reader.readuntil(b"\r\n\r\n")
        if not head.startswith(b"HTTP/1.1 200"):
            raise RuntimeError(head.decode("latin-1"))
        length = next(
            int(line.split(b":", 1)[1])
            for line in head.split(b"\r\n")
            if line.lower().startswith(b"content-length:")
        )
        await self.reader.readexactly(length)


async def connect(host: str, port: int, n: int) -> list[Conn]:
    return [Conn(*await asyncio.open_connection(host, port)) for _ in range(n)]


async def quiet(
    conns: list[Conn], request: bytes, rate: float, until: float, measured_from: float
) -> list[float]:
    """Open loop at ``rate``; each latency from when its request was due (ms)."""
    free = asyncio.Queue[Conn]()
    for conn in conns:
        free.put_nowait(conn)
    latencies: list[float] = []
    tasks = set()

    async def one(due: float) -> None:
        conn = await free.get()
        await conn.call(request)
        free.put_nowait(conn)
        if due >= measured_from:
            latencies.append((time.perf_counter() - due) * 1000)

    due = time.perf_counter()
    while due < until:
        delay = due - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        task = asyncio.create_task(one(due))
        tasks.add(task)
        task.add_done_callback(tasks.discard)
        due += 1 / rate
    await asyncio.gather(*tasks)
    return latencies


async def flood(conns: list[Conn], request: bytes, until: float, measured_from: float) -> int:
    """Each connection sends its next request as soon as its answer is in; answers counted in
    the measured window."""
    counted = 0

    async def loop(conn: Conn) -> None:
        nonlocal counted
        while time.perf_counter() < until:
            await conn.call(request)
            if time.perf_counter() >= measured_from:
                counted += 1

    await asyncio.gather(*(loop(c) for c in conns))
    return counted


async def case(url: str, flooding: bool, args: argparse.Namespace) -> dict[str, float]:
    host, port = url.removeprefix("http://").rsplit(":", 1)
    start = time.perf_counter()
    measured_from, until = start + args.warmup, start + args.warmup + args.duration
    b_conns = await connect(host, int(port), 32)
    work = [quiet(b_conns, request_bytes(host, KEYS["B"]), args.rate, until, measured_from)]
    if flooding:
        a_conns = await connect(host, int(port), args.flood_connections)
        work.append(flood(a_conns, request_bytes(host, KEYS["A"]), until, measured_from))
    results = await asyncio.gather(*work)
    latencies = sorted(results[0])
    for conn in b_conns + (a_conns if flooding else []):
        conn.writer.close()
    return {
        "b_rps": len(latencies) / args.duration,
        "a_rps": results[1] / args.duration if flooding else 0.0,
        "p50": latencies[len(latencies) // 2],
        "p99": latencies[int(len(latencies) * 0.99)],
    }


def load_process(url: str, flooding: bool, args: argparse.Namespace) -> dict[str, float]:
    """One case in a process of its own, pinned to --load-cpu."""
    cmd = ["taskset", "-c", str(args.load_cpu), sys.executable, __file__, "--client", url]
    cmd += ["--flooding"] if flooding else []
    cmd += [f"--{k.replace('_', '-')}={getattr(args, k)}" for k in PASSED]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    result: dict[str, float] = json.loads(out.strip().splitlines()[-1])
    return result


PASSED = ("rate", "duration", "warmup", "flood_connections")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--tree", default=str(Path(__file__).resolve().parent.parent))
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--duration", type=float, default=10.0)
    parser.add_argument("--warmup", type=float, default=2.0)
    parser.add_argument("--rate", type=float, default=140.0, help="key B's requests/s")
    parser.add_argument("--flood-connections", type=int, default=256)
    parser.add_argument("--batch-ms", type=float, default=20.0)
    parser.add_argument("--server-cpu", type=int, default=0)
    parser.add_argument("--load-cpu", type=int, default=1)
    parser.add_argument("--client", help=argparse.SUPPRESS)
    parser.add_argument("--flooding", action="store_true", help=argparse.SUPPRESS)
    return parser


def main() -> None:
    args = build_parser().parse_args()
    if args.client:
        print(json.dumps(asyncio.run(case(args.client, args.flooding, args))))
        return
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        make_repo(root / "repo", args.batch_ms)
        keys = root / "keys.txt"
        keys.write_text("".join(f"{key}\n" for key in KEYS.values()))
        proc, url = start_server(root / "repo", keys, args)
        try:
            runs: dict[str, list[dict[str, float]]] = {"alone": [], "flood": []}
            for _ in range(args.runs):
                for name, results in runs.items():
                    results.append(load_process(url, name == "flood", args))
                    print(name, results[-1], file=sys.stderr)
        finally:
            proc.terminate()
            proc.wait(timeout=30)
    print(
        f"tree {args.tree}: B at {args.rate:g}/s, batches of {args.batch_ms:g} ms, "
        f"median of {args.runs} runs"
    )
    print("| case | B req/s | A req/s | B p50 ms | B p99 ms |")
    print("|---|---:|---:|---:|---:|")
    for name, results in runs.items():
        med = {k: statistics.median(r[k] for r in results) for k in results[0]}
        print(
            f"| {name} | {med['b_rps']:.0f} | {med['a_rps']:.0f} | {med['p50']:.1f} | "
            f"{med['p99']:.1f} |"
        )
    alone = statistics.median(r["p99"] for r in runs["alone"])
    flooded = statistics.median(r["p99"] for r in runs["flood"])
    print(f"B's p99 flooded / alone: {flooded / alone:.2f}x")


if __name__ == "__main__":
    main()
