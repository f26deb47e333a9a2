"""The real TorchServe against rosettaserve serving the same .mar, side by side in one run.

Run (from TorchServe's venv, ``make install-torchserve``; wrk from Debian):

    .venv-torchserve/bin/python bench/torchserve_compare.py [--duration 10]

Both serve the test archives of tests_torchserve (built with torch-model-archiver): ``linear``
(a BaseHandler subclass over a TorchScript Linear(4, 2)) takes the small request, a JSON row of
four numbers; ``echo`` (a function handler) takes the 1 MiB one, application/octet-stream bytes,
and answers a short JSON. TorchServe runs as its docs advise for throughput: as many workers a
model as cores (its default), no metrics, no token; rosettaserve as ``runtime: torchserve``
with one handler instance a model. wrk drives each case at 1 and 16 connections for
``--duration`` seconds after a 2 s warm-up; the table gives requests/s and p99 latency.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.serverproc import served, start_server  # noqa: E402
from tests_torchserve.build_archives import build_repository, build_store  # noqa: E402
from tests_torchserve.conftest import run_torchserve  # noqa: E402

CASES = {  # name: (model, content type, body)
    "small": ("linear", "application/json", b"[1.0, 2.0, 3.0, 4.0]"),
    "1mib": ("echo", "application/octet-stream", os.urandom(1 << 20)),
}
SCRIPT = """\
wrk.method = "POST"
wrk.headers["Content-Type"] = "{ctype}"
local f = io.open("{body}", "rb")
wrk.body = f:read("*all")
f:close()
"""


def wrk(url: str, connections: int, seconds: int, script: Path) -> tuple[float, float]:
    cmd = ["wrk", "-t1", f"-c{connections}", f"-d{int(seconds)}s", "--latency", "--timeout", "30s",
           "-s", str(script), url]  # fmt: skip
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))  # type: ignore[union-attr]
    p99 = re.search(r"99%\s+([\d.]+)(us|ms|s)", out)
    assert p99 is not None, out
    scale = {"us": 1e-3, "ms": 1.0, "s": 1e3}[p99.group(2)]
    if "Non-2xx" in out:
        raise SystemExit(f"errors in the run:\n{out}")
    return rps, float(p99.group(1)) * scale


def measure(base: str, work: Path, seconds: int) -> dict[tuple[str, int], tuple[float, float]]:
    results = {}
    for case, (model, ctype, body) in CASES.items():
        (work / f"{case}.bin").write_bytes(body)
        script = work / f"{case}.lua"
        script.write_text(SCRIPT.format(ctype=ctype, body=work / f"{case}.bin"))
        url = f"{base}/predictions/{model}"
        for connections in (1, 16):
            wrk(url, connections, 2, script)  # warm-up
            results[case, connections] = wrk(url, connections, seconds, script)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=int, default=10)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        store = build_store(work / "store", work)
        repo = build_repository(store, work / "repo")
        (work / "ts").mkdir()
        with run_torchserve(store, work / "ts", workers=os.cpu_count() or 1) as (url, _):
            ts = measure(url, work, args.duration)
        server = start_server(repo)
        ours = measure(server.http_url, work, args.duration)
        for _ in served(server):
            pass
    print(
        "| case | connections | TorchServe req/s | p99 ms | rosettaserve req/s | p99 ms | ratio |"
    )
    print("|---|---|---|---|---|---|---|")
    for key, (rps, p99) in ts.items():
        our_rps, our_p99 = ours[key]
        print(f"| {key[0]} | {key[1]} | {rps:.0f} | {p99:.1f} | {our_rps:.0f} | {our_p99:.1f} "
              f"| {our_rps / rps:.1f}x |")  # fmt: skip


if __name__ == "__main__":
    main()
