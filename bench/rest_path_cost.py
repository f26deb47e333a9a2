"""The server's own cost of one small OIP REST infer request, in-process (no sockets).

    taskset -c 0 .venv/bin/python bench/rest_path_cost.py REPO [--requests 20000] [--rounds 7]

Loads REPO (one with a python identity model named ``identity``, as ``identity_repo`` in
bench/compare/rosetta.py writes it), then feeds the raw bytes
of ``POST /v2/models/identity/infer`` (FP32 [1,4], JSON) to an HTTP connection object whose
transport only counts writes: httptools parsing, routing, the data plane, the model and the
response encoding, as the server runs them. Prints the best round's microseconds per request.

Wall-clock time on a shared machine is noisy; instruction counts are not. Run it under callgrind
twice and subtract (startup cancels out):

    for n in 1000 3000; do PYTHONHASHSEED=0 valgrind --tool=callgrind \\
        --callgrind-out-file=/tmp/cg.$n .venv/bin/python bench/rest_path_cost.py REPO \\
        --requests $n --rounds 1; done       # (total(3000) - total(1000)) / 2000 per request
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

import uvloop

from rosettaserve.server import Server
from rosettaserve.settings import Settings
from rosettaserve.transport.h1 import Connection, HttpServer

BODY = b'{"inputs":[{"name":"INPUT0","shape":[1,4],"datatype":"FP32","data":[1.0,2.0,3.0,4.0]}]}'
REQUEST = (
    b"POST /v2/models/identity/infer HTTP/1.1\r\nHost: bench\r\n"
    b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(BODY)
) + BODY


class CountingTransport:
    def __init__(self) -> None:
        self.writes = 0

    def writelines(self, parts: list[Any]) -> None:
        self.writes += 1

    def write(self, data: bytes) -> None:
        self.writes += 1

    def get_extra_info(self, name: str) -> None:
        return None

    def close(self) -> None:
        pass

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


async def measure(repo: Path, requests: int, rounds: int) -> None:
    server = Server(Settings(repository=repo))
    await server.repository.load_all()
    server.dataplane.started = True
    conn = Connection(HttpServer(server.app, 1 << 26))
    transport = CountingTransport()
    conn.connection_made(transport)
    best = float("inf")
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(requests):
            conn.data_received(REQUEST)
            if conn.task is not None:  # a request that had to wait (a model on the pool)
                await conn.task
        best = min(best, (time.perf_counter() - start) / requests)
    if transport.writes != requests * rounds:
        raise SystemExit(f"expected {requests * rounds} responses, got {transport.writes}")
    print(f"{best * 1e6:.1f} us per request (best of {rounds} rounds of {requests})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("repository", type=Path)
    parser.add_argument("--requests", type=int, default=20000)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    uvloop.run(measure(args.repository, args.requests, args.rounds))


if __name__ == "__main__":
    main()
