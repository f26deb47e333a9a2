"""The server's own cost of one OIP REST infer request, in-process (no sockets).

    taskset -c 0 .venv/bin/python bench/rest_path_cost.py REPO [--requests 20000] [--rounds 7]
        [--model identity] [--body FILE] [--connections 1] [--access-log off|text|json]

Loads REPO (by default one with a python identity model named ``identity``, as
``identity_repo`` in bench/compare/rosetta.py writes it), then feeds the raw bytes of
``POST /v2/models/MODEL/infer`` (by default FP32 [1,4], JSON; or the JSON body in FILE) to
HTTP connection objects whose transport only counts writes: httptools parsing, routing, the
data plane, the model and the response encoding, as the server runs them. With
--connections N, each step sends one request on each of N connections before waiting for the
answers, so a dynamically batched model gets batches of up to N (the batching MLP's repository,
``rosetta_batching`` of bench/compare/rosetta.py, with ``--model mlp_batched``). Prints the best
round's microseconds per request.

Wall-clock time on a shared machine is noisy; instruction counts are not. Run it under callgrind
twice and subtract (startup cancels out):

    for n in 1000 3000; do PYTHONHASHSEED=0 valgrind --tool=callgrind \\
        --callgrind-out-file=/tmp/cg.$n .venv/bin/python bench/rest_path_cost.py REPO \\
        --requests $n --rounds 1; done       # (total(3000) - total(1000)) / 2000 per request
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time
from pathlib import Path
from typing import Any

import uvloop

from rosettaserve.observability import logging_setup
from rosettaserve.server.server import Server
from rosettaserve.server.settings import Settings
from rosettaserve.transport.h1 import Connection, HttpServer

SMALL_BODY = (
    b'{"inputs":[{"name":"INPUT0","shape":[1,4],"datatype":"FP32","data":[1.0,2.0,3.0,4.0]}]}'
)


def infer_request(model: str, body: bytes) -> bytes:
    head = (
        f"POST /v2/models/{model}/infer HTTP/1.1\r\nHost: bench\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


class CountingTransport:
    def __init__(self) -> None:
        self.writes = 0

    def writelines(self, parts: list[Any]) -> None:
        self.writes += 1

    def write(self, data: bytes) -> None:
        self.writes += 1

    def get_extra_info(self, name: str) -> None:
        return None

    def set_write_buffer_limits(self, high: int) -> None:
        pass

    def is_closing(self) -> bool:
        return False

    def close(self) -> None:
        pass

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


async def measure(
    repo: Path, request: bytes, requests: int, rounds: int, connections: int, *, access_log: str
) -> None:
    server = Server(Settings(repository=repo, access_log=access_log != "off", log_level="info"))
    await server.repository.load_all()
    server.dataplane.started = True
    if access_log != "off":  # its lines formatted and written, to /dev/null
        logging_setup.configure("info", access_log, stream=open(os.devnull, "w"))  # noqa: SIM115
    http = HttpServer(server.http_app, 1 << 26)
    transport = CountingTransport()
    conns = [Connection(http) for _ in range(connections)]
    for conn in conns:
        conn.connection_made(transport)
    steps = max(1, requests // connections)
    best = float("inf")
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(steps):
            for conn in conns:
                conn.data_received(request)
            for conn in conns:
                if conn.task is not None:  # a request that had to wait (pool or batcher)
                    await conn.task
            await asyncio.sleep(0)  # the server's flush: the step's responses are written
        best = min(best, (time.perf_counter() - start) / (steps * connections))
    expected = steps * connections * rounds
    if transport.writes != expected:
        raise SystemExit(f"expected {expected} responses, got {transport.writes}")
    print(f"{best * 1e6:.1f} us per request (best of {rounds} rounds of {steps * connections})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("repository", type=Path)
    parser.add_argument("--requests", type=int, default=20000)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--model", default="identity")
    parser.add_argument("--body", type=Path, help="a JSON infer body (default: FP32 [1,4])")
    parser.add_argument("--connections", type=int, default=1)
    parser.add_argument(
        "--access-log",
        choices=("off", "text", "json"),
        default="off",
        help="the server's access log (and request ids): off, or on in this format",
    )
    args = parser.parse_args()
    body = args.body.read_bytes() if args.body else SMALL_BODY
    request = infer_request(args.model, body)
    uvloop.run(
        measure(
            args.repository,
            request,
            args.requests,
            args.rounds,
            args.connections,
            access_log=args.access_log,
        )
    )


if __name__ == "__main__":
    main()
