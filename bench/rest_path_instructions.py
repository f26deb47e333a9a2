"""What one small OIP REST infer request costs the server in instructions (callgrind): the
server's HTTP/1.1 connection fed the request's bytes through its read buffer (``get_buffer``
and ``buffer_updated``, as the loop reads a socket), answered and written to a transport that
only counts. Settings as bench/compare serves (``--log-level warning``: no access log, no
request ids, no CORS, no tracing, no API key). Instrumentation is switched on after a warm-up
and off after ``--requests`` requests (``callgrind_control``), so start-up does not count and
the machine's load does not disturb the figure as it does CPU time. ``--connections 16``: each
round of the loop reads one request on each of 16 connections, as a server under wrk's 16
connections does (its writes then leave together).

    .venv/bin/python bench/rest_path_instructions.py REPO [--requests 2000] [--connections 1]
        [--keep FILE] [--model identity] [--cache-sim] [--body FILE] [--cache-size BYTES]

REPO: a repository with a python identity model (``identity_repo`` in bench/compare/rosetta.py).
``--keep FILE`` keeps the callgrind output (``callgrind_annotate FILE`` for the functions).
Works on older trees too (it reads ``server.http_app`` when there is one, ``server.app`` else),
so the same script measures two commits side by side.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

WARM_UP = 300
SMALL_BODY = (
    b'{"inputs":[{"name":"INPUT0","shape":[1,4],"datatype":"FP32","data":[1.0,2.0,3.0,4.0]}]}'
)


def child(args: argparse.Namespace) -> None:
    """Under valgrind: warm up, wait at ``<marker>.start``, run, wait at ``<marker>.stop``."""
    import asyncio
    import gc

    import uvloop
    from rest_path_cost import CountingTransport

    from rosettaserve.server.server import Server
    from rosettaserve.server.settings import Settings
    from rosettaserve.transport.h1 import Connection, HttpServer

    body = Path(args.body).read_bytes() if args.body else SMALL_BODY
    head = (
        f"POST /v2/models/{args.model}/infer HTTP/1.1\r\nHost: bench\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    request = head.encode() + body

    def wait(tag: str) -> None:
        flag = Path(f"{args.child}.{tag}")
        flag.write_text(tag)
        for _ in range(6000):  # at most ten minutes
            if not flag.exists():
                return
            time.sleep(0.1)

    async def run() -> None:
        server = Server(  # (a tree before the response cache has no cache_size setting)
            Settings(
                repository=args.repository,
                log_level="warning",
                **({"cache_size": args.cache_size} if args.cache_size else {}),
            )
        )
        await server.repository.load_all()
        server.dataplane.started = True
        limits: Any = None
        try:
            from rosettaserve.server.settings import http_limits

            limits = http_limits(server.settings)
        except ImportError:  # a tree before the limits were the settings' to make
            try:
                from rosettaserve.transport.h1_head import http_limits as older

                limits = older(server.settings)
            except ImportError:  # a tree before the HTTP/1.1 limits
                pass
        app = getattr(server, "http_app", server.app)
        http = HttpServer(app, 1 << 26, limits=limits) if limits else HttpServer(app, 1 << 26)
        transport = CountingTransport()
        conns = [Connection(http) for _ in range(args.connections)]
        for conn in conns:
            conn.connection_made(transport)

        async def step() -> None:  # a request on each connection, in one round of the loop
            for conn in conns:
                buffer = conn.get_buffer(-1)
                buffer[: len(request)] = request
                conn.buffer_updated(len(request))
            for conn in conns:
                if conn.answers.task is not None:
                    await conn.answers.task
            await asyncio.sleep(0)  # the round's flush

        for _ in range(WARM_UP):
            await step()
        gc.freeze()  # as the server does once the models are loaded (gc_tuning.settle)
        wait("start")
        for _ in range(args.requests):
            await step()
        wait("stop")
        if transport.writes != (WARM_UP + args.requests) * args.connections:
            raise SystemExit(f"{transport.writes} answers written")

    uvloop.run(run())


def parent(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        marker, out = f"{tmp}/marker", f"{tmp}/callgrind.out"
        argv = [
            "valgrind", "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={out}",
            *(["--cache-sim=yes", "--branch-sim=yes"] if args.cache_sim else []),
            sys.executable, __file__, str(args.repository), "--model", args.model,
            "--requests", str(args.requests), "--connections", str(args.connections),
            "--child", marker, *(["--body", str(args.body)] if args.body else []),
            "--cache-size", str(args.cache_size),
        ]  # fmt: skip
        # a fast predict runs on the loop's thread (core/invoker.py); under valgrind it is some 50
        # times slower, and would go to the model's thread now and then: not at full speed
        env = {**os.environ, "PYTHONHASHSEED": "0", "ROSETTASERVE_INLINE_US": "1000000"}
        with subprocess.Popen(
            argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
        ) as proc:
            for tag, switch in (("start", "on"), ("stop", "off")):
                flag = Path(f"{marker}.{tag}")
                while not flag.exists():
                    if proc.poll() is not None:
                        err = proc.stderr.read().decode()[-2000:]  # type: ignore[union-attr]
                        sys.exit(f"the measured process ended: {err}")
                    time.sleep(0.2)
                subprocess.run(
                    ["callgrind_control", "-i", switch, str(proc.pid)],
                    check=True,
                    capture_output=True,
                )
                flag.unlink()
            proc.wait(timeout=600)
        totals = subprocess.run(
            ["callgrind_annotate", out], check=True, capture_output=True, text=True
        ).stdout
        if args.keep:
            shutil.copyfile(out, args.keep)
    count = args.requests * args.connections
    events = re.search(r"Events shown:\s+(.*)", totals)
    found = re.search(r"^(.*)PROGRAM TOTALS", totals, re.MULTILINE)
    assert events is not None, totals[:2000]
    assert found is not None, totals[:2000]
    figures = [int(f.replace(",", "")) for f in re.findall(r"([\d,]+) \(", found.group(1))]
    total = figures[0]
    if args.cache_sim:  # simulated caches (valgrind's model of this CPU) and branch predictor
        for name, figure in zip(events.group(1).split(), figures, strict=True):
            print(f"{name}: {figure / count:,.1f} per request")
    print(
        f"REST small: {total / count:,.0f} instructions per request ({args.requests} rounds "
        f"of one request on each of {args.connections} connections)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("repository", type=Path)
    parser.add_argument("--model", default="identity")
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument(
        "--connections", type=int, default=1, help="requests in one round of the loop"
    )
    parser.add_argument(
        "--cache-sim", action="store_true", help="also simulated cache misses and mispredictions"
    )
    parser.add_argument("--keep", help="keep the callgrind output in this file")
    parser.add_argument("--body", help="a file holding the JSON request body (else a small one)")
    parser.add_argument(
        "--cache-size", type=int, default=0, help="bytes of response cache (--cache-size)"
    )
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args)
    else:
        parent(args)


if __name__ == "__main__":
    main()
