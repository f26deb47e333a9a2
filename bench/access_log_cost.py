"""What the access log costs a request, in one process: rounds alternate between the server
without it and with it (lines formatted and written to /dev/null), each timed in this thread's
CPU time (``time.thread_time``: what the server's thread ran, not the time other processes held
the CPU: steadier than wall-clock on a shared machine). Prints, per variant, the minimum and the
median over the rounds of the microseconds per request.

    taskset -c 1 .venv/bin/python bench/access_log_cost.py REPO rest|grpc [--log-format text|json]
        [--rounds 40] [--requests 1000]

REPO: a repository with the python identity model ``identity`` (``identity_repo`` in
bench/compare/rosetta.py). The request paths are rest_path_cost.py's and grpc_path_cost.py's.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import uvloop
from grpc_path_cost import CountingTransport as H2Transport
from grpc_path_cost import client_frames, infer_request
from rest_path_cost import SMALL_BODY, CountingTransport
from rest_path_cost import infer_request as rest_request

from rosettaserve.observability import logging_setup
from rosettaserve.protocols.oip.grpc import RPCS, SERVICE, OipServicer
from rosettaserve.server.server import Server
from rosettaserve.server.settings import Settings
from rosettaserve.transport import h2, h2_wire
from rosettaserve.transport.grpc import GrpcServer
from rosettaserve.transport.h1 import Connection, HttpServer
from rosettaserve.transport.observers import CallLines

Step = Callable[[], Awaitable[None]]


async def rest_steps(server: Server) -> dict[str, Step]:
    request = rest_request("identity", SMALL_BODY)
    steps: dict[str, Step] = {}
    for name, app in (("off", server.app), ("on", server.http_app)):
        conn = Connection(HttpServer(app, 1 << 26))
        conn.connection_made(CountingTransport())

        async def step(conn: Connection = conn) -> None:
            conn.data_received(request)
            if conn.task is not None:
                await conn.task
            await asyncio.sleep(0)  # the round's flush: answers and log lines written

        steps[name] = step
    return steps


async def grpc_steps(server: Server) -> dict[str, Step]:
    services = [(SERVICE, OipServicer(server.dataplane, server.calls), RPCS)]
    port = GrpcServer(services, 1 << 30, server.calls)
    conn = h2.Connection(port.h2)
    conn.connection_made(H2Transport())
    window = h2_wire.MAX_WINDOW - h2_wire.DEFAULT_WINDOW
    setting = h2_wire.INITIAL_WINDOW_SIZE.to_bytes(2, "big") + h2_wire.MAX_WINDOW.to_bytes(4, "big")
    conn.data_received(
        h2_wire.PREFACE
        + h2_wire.frame(h2_wire.SETTINGS, 0, 0, 6)
        + setting
        + h2_wire.frame(h2_wire.WINDOW_UPDATE, 0, 0, 4)
        + window.to_bytes(4, "big")
    )
    message = infer_request("identity", False)
    ids = iter(range(1, 1 << 30, 2))

    def step_with(lines: CallLines | None) -> Step:
        async def step() -> None:
            port.call_lines = lines
            conn.data_received(client_frames(next(ids), message))
            while conn.streams:
                await asyncio.sleep(0)
            await asyncio.sleep(0)

        return step

    lines = None if server.access is None else server.access.call_lines()
    return {"off": step_with(None), "on": step_with(lines)}


async def measure(repo: Path, which: str, rounds: int, requests: int) -> dict[str, list[float]]:
    server = Server(Settings(repository=repo, log_level="info"))
    await server.repository.load_all()
    server.dataplane.started = True
    steps = await (rest_steps(server) if which == "rest" else grpc_steps(server))
    times: dict[str, list[float]] = {name: [] for name in steps}
    for n in range(rounds + 2):
        for name, step in steps.items():
            start = time.thread_time()
            for _ in range(requests):
                await step()
            if n >= 2:  # two rounds of warm-up
                times[name].append((time.thread_time() - start) / requests * 1e6)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("repository", type=Path)
    parser.add_argument("transport", choices=("rest", "grpc"))
    parser.add_argument("--log-format", choices=logging_setup.FORMATS, default="text")
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--requests", type=int, default=1000)
    args = parser.parse_args()
    logging_setup.configure("info", args.log_format, stream=open(os.devnull, "w"))  # noqa: SIM115
    times = uvloop.run(measure(args.repository, args.transport, args.rounds, args.requests))
    for name, values in times.items():
        print(
            f"{args.transport} access log {name} ({args.log_format}): min {min(values):.2f}, "
            f"median {statistics.median(values):.2f} us per request (thread CPU time, "
            f"{len(values)} rounds of {args.requests})"
        )


if __name__ == "__main__":
    main()
