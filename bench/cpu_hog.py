"""Busy loops pinned to a core: another process busy on the server's core, made on purpose.

A pod under a CPU limit, or a server whose core another process also uses, gets the core in
slices: every wait of the server (for a thread, for the network) may cost it a slice of the
other process. ``busy_loops(cpu, n)`` starts ``n`` processes that do nothing but spin, each
pinned to ``cpu`` with taskset, at the same priority as the server, and kills them (by their
own pids) when the block ends. bench/batching_mlp.py (``--hogs``) and bench/compare's
``batching-contended`` case measure under them.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
from collections.abc import Iterator

SPIN = "while True: pass"


@contextlib.contextmanager
def busy_loops(cpu: int, count: int) -> Iterator[list[int]]:
    """``count`` busy-loop processes pinned to ``cpu`` while the block runs (their pids)."""
    procs: list[subprocess.Popen[bytes]] = []
    try:
        for _ in range(count):
            argv = ["taskset", "-c", str(cpu), sys.executable, "-c", SPIN]
            procs.append(subprocess.Popen(argv, stdin=subprocess.DEVNULL))
        yield [p.pid for p in procs]
    finally:
        for proc in procs:
            proc.kill()
        for proc in procs:
            proc.wait()
