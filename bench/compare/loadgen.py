"""The load generators: run wrk (REST) or h2load (gRPC) pinned to the load core (``Load``), keep
their raw output, and parse it into a ``Measurement`` (h2load's latencies from its per-request
log, and its gRPC calls without an answer message counted as errors).
"""

from __future__ import annotations

import math
import re
import shlex
import subprocess
from dataclasses import dataclass
from pathlib import Path

from bodies import Body
from measurements import Measurement, percentile, to_ms

LOAD_TIMEOUT = "30s"  # wrk's per-request timeout (its default, 2 s, is short for 1 MiB JSON)


@dataclass
class Load:
    """Where and how long the load generator runs."""

    cpu: int
    duration: int
    warmup: int
    raw: Path


def run_tool(cmd: list[str], out: Path) -> str:
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False)
    text = proc.stdout + proc.stderr
    out.write_text(shlex.join(cmd) + "\n\n" + text)
    if proc.returncode != 0:
        raise RuntimeError(f"{cmd[3]} exited with {proc.returncode}: {text[-500:]}")
    return text


def wrk(load: Load, url: str, script: Path, *, conns: int, seconds: int, tag: str) -> Measurement:
    cmd = ["taskset", "-c", str(load.cpu), "wrk", "-t1", f"-c{conns}", f"-d{seconds}s"]
    cmd += ["--timeout", LOAD_TIMEOUT, "--latency", "-s", str(script), url]
    return parse_wrk(run_tool(cmd, load.raw / f"{tag}.wrk.txt"))


def parse_wrk(out: str) -> Measurement:
    def find(pattern: str) -> str:
        match = re.search(pattern, out, re.M)
        if match is None:
            raise RuntimeError(f"wrk output without {pattern!r}:\n{out[-800:]}")
        return match.group(1)

    errors = 0
    socket_errors = re.search(
        r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", out
    )
    if socket_errors:
        errors += sum(int(g) for g in socket_errors.groups())
    non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    if non2xx:
        errors += int(non2xx.group(1))
    m = Measurement(
        rps=float(find(r"Requests/sec:\s+([\d.]+)")),
        p50=to_ms(find(r"^\s+50%\s+(\S+)")),
        p99=to_ms(find(r"^\s+99%\s+(\S+)")),
        requests=int(find(r"(\d+) requests in")),
        errors=errors,
    )
    if m.requests == 0:  # wrk then prints 0us percentiles
        m.p50 = m.p99 = math.nan
        m.note = "no request completed in the run"
    return m


def h2load(
    load: Load, url: str, body: Body, *, conns: int, seconds: int, tag: str, answer_size: int
) -> Measurement:
    """One h2load run. Its own --warm-up-time is not used: h2load's DATA byte count (which the
    gRPC error check needs) includes the warm-up, its request counts do not; the warm-up is a
    separate run instead, as for wrk."""
    log = load.raw / f"{tag}.h2load.log"
    cmd = ["taskset", "-c", str(load.cpu), "h2load", "-t1", f"-c{conns}", "-m1"]
    cmd += ["-D", str(seconds)]
    for k, v in body.headers.items():
        cmd += ["-H", f"{k}: {v}"]
    cmd += ["-d", str(body.path), "--log-file", str(log), url]
    return parse_h2load(run_tool(cmd, load.raw / f"{tag}.h2load.txt"), log, answer_size)


def parse_h2load(out: str, log: Path, answer_size: int) -> Measurement:
    """Throughput from h2load's summary, latency percentiles from its per-request log.

    h2load cannot see gRPC's grpc-status trailer: a failed call is an HTTP 200 without a message.
    So a mean DATA size per request well under the size of the checked answer is counted as
    failed calls.
    """
    summary = re.search(r"finished in [\d.]+\w+, ([\d.]+) req/s", out)
    counts = re.search(
        r"requests: (\d+) total, (\d+) started, (\d+) done, (\d+) succeeded, (\d+) failed, "
        r"(\d+) errored, (\d+) timeout",
        out,
    )
    statuses = re.search(r"status codes: (\d+) 2xx, (\d+) 3xx, (\d+) 4xx, (\d+) 5xx", out)
    data = re.search(r"\((\d+)\) data", out)
    if not (summary and counts and statuses and data):
        raise RuntimeError(f"unexpected h2load output:\n{out[-800:]}")
    done = int(counts.group(3))
    errors = sum(int(counts.group(i)) for i in (5, 6, 7))
    errors += int(statuses.group(3)) + int(statuses.group(4))
    times, bad_status = [], 0
    for line in log.read_text().splitlines():
        parts = line.split("\t")
        if len(parts) >= 3:
            if parts[1] != "200":
                bad_status += 1
            times.append(int(parts[2]) / 1000)
    times.sort()
    note = ""
    expected = answer_size + 5  # the gRPC frame of the checked answer
    if done and answer_size and int(data.group(1)) / done < 0.9 * expected:
        missing = done - int(data.group(1)) // expected
        errors += missing
        note = f"~{missing} calls without an answer message (gRPC errors)"
    if done == 0:
        note = "no request completed in the run"
    return Measurement(
        rps=float(summary.group(1)),
        p50=percentile(times, 50),
        p99=percentile(times, 99),
        requests=done,
        errors=max(errors, bad_status),
        note=note,
    )
