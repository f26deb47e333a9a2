"""What the access log costs a request in instructions (callgrind), which a loaded machine does
not disturb as it does CPU time: the server of access_log_cost.py, one variant (``off``: no
access log, ``on``: lines formatted and written to /dev/null), warmed up, then ``--requests``
requests counted alone (instrumentation is switched on and off around them with
``callgrind_control``). Prints the instructions per request.

    .venv/bin/python bench/access_log_instructions.py REPO rest|grpc off|on
        [--log-format text|json] [--requests 2000]

REST counts are steady to a few hundred instructions; gRPC's vary by some tens of thousands from
run to run (the step waits for the call's task by spinning the loop): repeat those.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

WARM_UP = 300


def child(args: argparse.Namespace) -> None:
    """Under valgrind: warm up, wait at ``<marker>.start``, run, wait at ``<marker>.stop``."""
    import uvloop
    from access_log_cost import grpc_steps, rest_steps

    from rosettaserve.observability import logging_setup
    from rosettaserve.server.server import Server
    from rosettaserve.server.settings import Settings

    def wait(tag: str) -> None:
        flag = Path(f"{args.child}.{tag}")
        flag.write_text(tag)
        for _ in range(6000):  # at most ten minutes
            if not flag.exists():
                return
            time.sleep(0.1)

    async def run() -> None:
        server = Server(Settings(repository=args.repository, log_level="info"))
        await server.repository.load_all()
        server.dataplane.started = True
        steps = await (rest_steps(server) if args.transport == "rest" else grpc_steps(server))
        step = steps[args.variant]
        for _ in range(WARM_UP):
            await step()
        wait("start")
        for _ in range(args.requests):
            await step()
        wait("stop")

    logging_setup.configure("info", args.log_format, stream=open(os.devnull, "w"))  # noqa: SIM115
    uvloop.run(run())


def parent(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        marker, out = f"{tmp}/marker", f"{tmp}/callgrind.out"
        argv = [
            "valgrind", "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={out}",
            sys.executable, __file__, str(args.repository), args.transport, args.variant,
            "--log-format", args.log_format, "--requests", str(args.requests), "--child", marker,
        ]  # fmt: skip
        env = {**os.environ, "PYTHONHASHSEED": "0"}
        with subprocess.Popen(
            argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
        ) as proc:
            for tag, switch in (("start", "on"), ("stop", "off")):
                flag = Path(f"{marker}.{tag}")
                while not flag.exists():
                    if proc.poll() is not None:
                        sys.exit(
                            f"the measured process ended: {proc.stderr.read().decode()[-2000:]}"
                        )  # type: ignore[union-attr]
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
    found = re.search(r"([\d,]+) \(.*PROGRAM TOTALS", totals)
    assert found is not None, totals[:2000]
    total = int(found.group(1).replace(",", ""))
    print(
        f"{args.transport} access log {args.variant} ({args.log_format}): "
        f"{total / args.requests:,.0f} instructions per request ({args.requests} requests)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("repository", type=Path)
    parser.add_argument("transport", choices=("rest", "grpc"))
    parser.add_argument("variant", choices=("off", "on"))
    parser.add_argument("--log-format", choices=("text", "json"), default="text")
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args)
    else:
        parent(args)


if __name__ == "__main__":
    main()
