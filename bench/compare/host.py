"""The host a comparison ran on: the load generators' and the driver's versions, the CPU, the
load average, and each CPU's time stolen by the hypervisor over the run (/proc/stat).
"""

from __future__ import annotations

import contextlib
import os
import platform
import re
import subprocess
from pathlib import Path

import numpy as np


def tool_versions() -> list[str]:
    def first_line(cmd: list[str]) -> str:
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        except OSError:
            return "missing"
        return (
            (proc.stdout + proc.stderr).strip().splitlines()[0]
            if proc.stdout + proc.stderr
            else "?"
        )

    packages = first_line(
        ["dpkg-query", "-W", "-f=${Package} ${Version}, ", "wrk", "nghttp2-client"]
    )
    import grpc

    return [
        f"wrk: `{first_line(['wrk', '-v'])}`",
        f"h2load: `{first_line(['h2load', '--version'])}`",
        f"Debian packages: {packages.rstrip(', ')}",
        f"driver: Python {platform.python_version()}, numpy {np.__version__}, "
        f"grpcio {grpc.__version__} (answer checks only)",
    ]


def machine() -> str:
    model = ""
    with contextlib.suppress(OSError):
        found = re.search(r"^model name\s*:\s*(.+)$", Path("/proc/cpuinfo").read_text(), re.M)
        model = found.group(1) if found else ""
    return f"{os.cpu_count()} CPUs ({model}), Linux {platform.release()}"


def loadavg() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def cpu_times() -> dict[str, list[int]]:
    """Each CPU's line of /proc/stat (``cpu0``: user, nice, system, idle, iowait, irq, softirq,
    steal, ...; in clock ticks since boot)."""
    lines = Path("/proc/stat").read_text().splitlines()
    return {p[0]: [int(v) for v in p[1:]] for p in map(str.split, lines) if p[0][3:].isdigit()}


def steal_shares(before: dict[str, list[int]], after: dict[str, list[int]]) -> str:
    """How much of each CPU's time the hypervisor gave to other guests in between (steal)."""
    shares = []
    for cpu, ticks in after.items():
        spent = [b - a for a, b in zip(before.get(cpu, ticks), ticks, strict=True)]
        if sum(spent) > 0 and len(spent) > 7:
            shares.append(f"{cpu} {spent[7] / sum(spent):.0%}")
    return ", ".join(shares) or "not reported"
