"""What the benchmarks beside Triton share (``triton_ensemble.py``, ``triton_extensions.py``): the
two servers of tests_triton (rosettaserve, and Triton Inference Server 2.51 from nvidia-pytriton
0.7.0) started in turn on one repository, pinned to the server core, and wrk or h2load
(bench/compare's runners) on the client core.

Run from ``.venv-triton`` (``make install-triton``), as tests_triton is.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "bench" / "compare")]

from bodies import Body, write_lua  # noqa: E402
from loadgen import Load, h2load, wrk  # noqa: E402
from measurements import Measurement  # noqa: E402

from tests_triton import servers  # noqa: E402
from tests_triton.servers import SERVERS, Peer  # noqa: E402

__all__ = [
    "SERVERS",
    "Body",
    "Load",
    "Measurement",
    "Peer",
    "arguments",
    "h2load_run",
    "pin_servers",
    "serving",
    "write_lua",
    "wrk_run",
]


def arguments(doc: str, duration: int = 5) -> argparse.ArgumentParser:
    """The options every such benchmark takes: how long, how often, which cores."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--duration", type=int, default=duration, help="seconds a measured run")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--server-core", type=int, default=0)
    parser.add_argument("--client-core", type=int, default=1)
    return parser


def pin_servers(core: int) -> None:
    """The servers (and their children, Triton's Python backend stubs) inherit this."""
    os.sched_setaffinity(0, {core})


@contextlib.contextmanager
def serving(
    name: str,
    source: Path,
    work: Path,
    rosettaserve_args: Sequence[str] = (),
    triton_args: Sequence[str] = (),
) -> Iterator[Peer]:
    """``name`` (one of ``SERVERS``) serving a copy of the repository ``source``, started with
    the flags given in its own spelling; stopped at the end."""
    before = list(servers.ROSETTASERVE_ARGS), list(servers.TRITON_ARGS)
    servers.ROSETTASERVE_ARGS[:], servers.TRITON_ARGS[:] = rosettaserve_args, triton_args
    try:
        repository = servers.copy_repository(work / name / "repository", source)
        peer = servers.start(name, repository, work / name)
    finally:
        servers.ROSETTASERVE_ARGS[:], servers.TRITON_ARGS[:] = before
    try:
        yield peer
    finally:  # (one that died on the way is the caller's to report: a load run fails)
        if peer.process.proc.poll() is None and peer.process.stop() != 0:
            # Triton 2.51 here at times dies with SIGSEGV as it stops: said, not fatal
            signals = [line for line in peer.process.lines if line.startswith("Signal")]
            print(f"{name} did not exit cleanly when stopped: {signals}", file=sys.stderr)


def checked(m: Measurement, what: str) -> Measurement:
    if m.errors or not m.requests:
        raise SystemExit(f"{what}: {m.errors} errors, {m.requests} requests ({m.note})")
    return m


def wrk_run(load: Load, url: str, script: Path, seconds: int, tag: str) -> Measurement:
    """One connection, a request at a time, for ``seconds``; errors end the benchmark."""
    return checked(wrk(load, url, script, conns=1, seconds=seconds, tag=tag), tag)


def h2load_run(
    load: Load, url: str, body: Body, seconds: int, tag: str, *, answer_size: int
) -> Measurement:
    """The same with h2load for gRPC (``answer_size``: the answer message's, to tell a call
    that failed, which h2load sees as a 200 without a message)."""
    m = h2load(load, url, body, conns=1, seconds=seconds, tag=tag, answer_size=answer_size)
    return checked(m, tag)
