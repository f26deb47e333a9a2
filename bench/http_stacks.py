"""HTTP stacks under load: raw ASGI (inline, or via a thread pool) vs Starlette vs rosettaserve.

Run:  bash bench/run_http.sh   (or .venv/bin/python bench/http_stacks.py --help)

All servers are started first, pinned to --server-cpu (idle ones cost nothing); this process
and wrk are pinned to --load-cpu. After a warm-up per configuration, --runs rounds each run wrk
once per configuration (--duration s, --connections keep-alive connections), so drift on this
shared machine hits every configuration alike; ratios are medians of the per-round ratios.
Then --runs rounds of --latency-requests sequential requests on one kept-alive http.client
connection. Runs during which other processes used the cores are discarded and measured again.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import http.client
import json
import os
import re
import resource
import shlex
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import orjson

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
T = TypeVar("T")
INFER = "/v2/models/versioned_python/versions/1/infer"
JSON_BODY = b'{"inputs":[{"name":"INPUT0","datatype":"FP32","shape":[1,4],"data":[1,2,3,4]}]}'
BIN_HEADER = (
    b'{"inputs":[{"name":"INPUT0","datatype":"FP32","shape":[1,4],'
    b'"parameters":{"binary_data_size":16}}]}'
)
BIN_BODY = BIN_HEADER + b"\x00\x00\x80?\x00\x00\x00@\x00\x00@@\x00\x00\x80@"  # FP32 1,2,3,4


@dataclass
class Config:
    name: str
    server: list[str]  # {port} is substituted
    path: str
    body: bytes
    headers: dict[str, str] = field(default_factory=dict)
    expect: Any = None  # expected OUTPUT0 data; None = the echo of body


def rosetta_cmd() -> list[str]:
    cmd = [str(BIN / "rosettaserve"), "serve", "examples/models", "--http-port", "{port}"]
    usage = subprocess.run([*cmd[:2], "--help"], check=True, capture_output=True, text=True)
    if "--grpc-port" in usage.stdout:
        cmd += ["--grpc-port", "0"]  # any free port: never collide with other servers
    return [*cmd, "--log-level", "warning"]


ROSETTA = rosetta_cmd()
SELF = [sys.executable, str(Path(__file__).resolve()), "serve"]
JSON_CT = {"Content-Type": "application/json"}
CONFIGS = [
    Config("raw-asgi", [*SELF, "raw", "{port}"], "/echo", JSON_BODY, JSON_CT),
    Config("raw-executor", [*SELF, "raw-executor", "{port}"], "/echo", JSON_BODY, JSON_CT),
    Config("starlette", [*SELF, "starlette", "{port}"], "/echo", JSON_BODY, JSON_CT),
    Config("rosetta-json", ROSETTA, INFER, JSON_BODY, JSON_CT, [1.0, 2.0, 3.0, 4.0]),
    Config(
        "rosetta-binary",
        ROSETTA,
        INFER,
        BIN_BODY,
        {
            "Content-Type": "application/octet-stream",
            "Inference-Header-Content-Length": str(len(BIN_HEADER)),
        },
        [1.0, 2.0, 3.0, 4.0],
    ),
]


# -- the baseline servers (child processes: http_stacks.py serve KIND PORT) -------------------


def echo(body: bytes) -> bytes:
    return orjson.dumps(orjson.loads(body))


async def raw_app(scope: dict[str, Any], receive: Any, send: Any, pool: Any = None) -> None:
    """A JSON echo; with a pool, the echo runs on it (as rosettaserve runs Python models)."""
    if scope["type"] != "http":
        return
    chunks, more = [], True
    while more:
        message = await receive()
        chunks.append(message.get("body", b""))
        more = message.get("more_body", False)
    status, out = 404, b'{"error":"not found"}'
    if scope["method"] == "POST" and scope["path"] == "/echo":
        body = b"".join(chunks)
        loop = asyncio.get_running_loop()
        out = echo(body) if pool is None else await loop.run_in_executor(pool, echo, body)
        status = 200
    headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(out))]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": out})


def starlette_app() -> Any:
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import Response
    from starlette.routing import Route

    async def endpoint(request: Request) -> Response:
        return Response(echo(await request.body()), media_type="application/json")

    return Starlette(routes=[Route("/echo", endpoint, methods=["POST"])])


def serve(kind: str, port: int) -> None:
    import uvicorn

    app: Any = {"raw": raw_app, "starlette": starlette_app()}.get(kind)
    if kind == "raw-executor":  # the pool of rosettaserve.core.executor
        pool = ThreadPoolExecutor(max_workers=min(32, (os.cpu_count() or 1) + 4))
        app = functools.partial(raw_app, pool=pool)
    # The same uvicorn settings as rosettaserve.server.server.Server.run.
    uvicorn.run(
        app,
        host="127.0.0.1",
        port=port,
        loop="uvloop",
        http="httptools",
        lifespan="off",
        interface="asgi3",
        proxy_headers=False,
        server_header=False,
        date_header=False,
        access_log=False,
        log_level="warning",
    )


# -- the driver ---------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def request(conn: http.client.HTTPConnection, cfg: Config) -> bytes:
    conn.request("POST", cfg.path, cfg.body, cfg.headers)
    resp = conn.getresponse()
    data = resp.read()
    if resp.status != 200:
        raise RuntimeError(f"{cfg.name}: HTTP {resp.status}: {data[:200]!r}")
    return data


def check(cfg: Config, data: bytes) -> None:
    if cfg.expect is None:
        ok = orjson.loads(data) == orjson.loads(cfg.body)
    else:
        ok = orjson.loads(data)["outputs"][0]["data"] == cfg.expect
    if not ok:
        raise RuntimeError(f"{cfg.name}: unexpected response {data[:200]!r}")


def wait_ready(cfg: Config, port: int, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{cfg.name}: server exited with {proc.returncode}")
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            check(cfg, request(conn, cfg))
            conn.close()
            return
        except (OSError, RuntimeError):
            time.sleep(0.2)
    raise RuntimeError(f"{cfg.name}: server not ready")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def core_busy(cpu: int) -> float:
    """Busy seconds of one core since boot (everything but idle and iowait), from /proc/stat."""
    for line in Path("/proc/stat").read_text().splitlines():
        if line.startswith(f"cpu{cpu} "):
            ticks = [int(x) for x in line.split()[1:9]]
            return (sum(ticks) - ticks[3] - ticks[4]) / os.sysconf("SC_CLK_TCK")
    raise ValueError(f"no cpu{cpu} in /proc/stat")


def own_load_seconds() -> float:
    """CPU of this process (the latency client) and its finished children (wrk)."""
    me, kids = (
        resource.getrusage(resource.RUSAGE_SELF),
        resource.getrusage(resource.RUSAGE_CHILDREN),
    )
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


class Probe:
    """CPU % during a measurement: the server's, and other processes' on each core
    (other agents share this machine; runs they disturb are measured again)."""

    def __init__(self, server_pid: int, server_cpu: int, load_cpu: int) -> None:
        self.pid, self.cores = server_pid, (server_cpu, load_cpu)

    def snapshot(self) -> tuple[float, ...]:
        own = (cpu_seconds(self.pid), own_load_seconds())
        return (time.monotonic(), *own, *(core_busy(c) for c in self.cores))

    def __enter__(self) -> Probe:
        self.start = self.snapshot()
        return self

    def __exit__(self, *exc: object) -> None:
        t, srv, load, core0, core1 = (
            b - a for a, b in zip(self.start, self.snapshot(), strict=True)
        )
        self.server = 100 * srv / t
        self.other = (100 * (core0 - srv) / t, 100 * (core1 - load) / t)

    def clean(self, args: argparse.Namespace) -> bool:
        return self.other[0] <= args.max_other and self.other[1] <= args.max_other_load

    def __str__(self) -> str:
        core0, core1 = self.other
        return f"others used {core0:.0f}% of the server core, {core1:.0f}% of the load core"


def wait_quiet(cores: tuple[int, ...], limit: float, threshold: float = 5.0) -> None:
    """Wait (up to limit s) until other processes leave both cores idle."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        before = [core_busy(c) for c in cores]
        time.sleep(1.0)
        if max(core_busy(c) - b for c, b in zip(cores, before, strict=True)) < threshold / 100:
            return


class Disturbed(Exception):
    """A run spoiled by other processes: measure it again."""


def measured(fn: Callable[[], T], probe: Probe, args: argparse.Namespace) -> tuple[T, Probe]:
    """fn() on quiet cores, measured again while others used more than --max-other(-load)."""
    for _ in range(args.attempts):
        wait_quiet(probe.cores, args.quiet_wait)
        try:
            with probe:
                result = fn()
        except Disturbed as exc:
            print(f"  (discarded: {exc}; measuring again)")
            continue
        if probe.clean(args):
            return result, probe
        print(f"  (discarded: {probe}; measuring again)")
    raise RuntimeError(f"no undisturbed run in {args.attempts} attempts")


def to_ms(value: str) -> float:
    num, unit = re.fullmatch(r"([\d.]+)(us|ms|s)", value).groups()  # type: ignore[union-attr]
    return float(num) * {"us": 1e-3, "ms": 1.0, "s": 1e3}[unit]


def wrk(cmd: list[str]) -> dict[str, float]:
    done = subprocess.run(cmd, check=False, capture_output=True, text=True)
    out = done.stdout
    if done.returncode or "Non-2xx or 3xx responses" in out:
        raise RuntimeError(f"wrk failed ({done.returncode}):\n{out}{done.stderr}")
    if "Socket errors" in out:  # timeouts: a starved run (see measured)
        raise Disturbed(re.search(r"Socket errors: .*", out).group(0))  # type: ignore[union-attr]
    return {
        "rps": float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1)),  # type: ignore[union-attr]
        "p50": to_ms(re.search(r"^\s+50%\s+(\S+)", out, re.M).group(1)),  # type: ignore[union-attr]
        "p99": to_ms(re.search(r"^\s+99%\s+(\S+)", out, re.M).group(1)),  # type: ignore[union-attr]
    }


def lua_script(cfg: Config, tmp: Path) -> Path:
    body = tmp / f"{cfg.name}.body"
    body.write_bytes(cfg.body)
    lines = [f'local f = assert(io.open("{body}", "rb"))', "wrk.body = f:read('*a')", "f:close()"]
    lines.append('wrk.method = "POST"')
    lines += [f'wrk.headers["{k}"] = "{v}"' for k, v in cfg.headers.items()]
    script = tmp / f"{cfg.name}.lua"
    script.write_text("\n".join(lines) + "\n")
    return script


def latency(cfg: Config, port: int, n: int) -> tuple[float, float]:
    conn = http.client.HTTPConnection("127.0.0.1", port)
    for _ in range(200):
        request(conn, cfg)
    samples = []
    for _ in range(n):
        t0 = time.perf_counter()
        request(conn, cfg)
        samples.append((time.perf_counter() - t0) * 1e3)
    conn.close()
    return statistics.median(samples), statistics.quantiles(samples, n=100)[98]


class Target:
    """One configuration: its (possibly shared) server, wrk command and results."""

    def __init__(self, cfg: Config, proc: subprocess.Popen[bytes], port: int, args: Any) -> None:
        self.cfg, self.port = cfg, port
        self.probe = Probe(proc.pid, args.server_cpu, args.load_cpu)
        load = ["taskset", "-c", str(args.load_cpu), "wrk", "-t1", f"-c{args.connections}"]
        self.opts = ["--latency", "-s", str(lua_script(cfg, args.tmp))]
        self.opts.append(f"http://127.0.0.1:{port}{cfg.path}")
        self.warm = [*load, f"-d{args.warmup}s", *self.opts]
        self.cmd = [*load, f"-d{args.duration}s", *self.opts]
        self.runs: list[dict[str, float]] = []
        self.lat: list[tuple[float, float]] = []


def start_servers(cfgs: list[Config], args: argparse.Namespace) -> list[Target]:
    """One server per distinct command (rosetta-json and -binary share one), all on server-cpu."""
    servers: dict[tuple[str, ...], tuple[subprocess.Popen[bytes], int]] = {}
    targets = []
    for cfg in cfgs:
        if tuple(cfg.server) not in servers:
            port = free_port()
            cmd = ["taskset", "-c", str(args.server_cpu)] + [
                a.format(port=port) for a in cfg.server
            ]
            log = (args.tmp / f"{cfg.name}.log").open("wb")
            proc = subprocess.Popen(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
            args.procs.append(proc)
            servers[tuple(cfg.server)] = proc, port
            print(f"# server {cfg.name}: {shlex.join(cmd)}")
        proc, port = servers[tuple(cfg.server)]
        wait_ready(cfg, port, proc)
        targets.append(Target(cfg, proc, port, args))
    return targets


def run_all(targets: list[Target], args: argparse.Namespace) -> None:
    for t in targets:
        wrk(t.warm)
        print(f"# load {t.cfg.name}: {shlex.join(t.cmd)}", flush=True)
    for i in range(args.runs):  # rounds interleave the configurations: drift hits them all
        for t in targets:
            r, p = measured(lambda t=t: wrk(t.cmd), t.probe, args)
            r |= {"cpu": p.server, "other0": p.other[0], "other1": p.other[1]}
            t.runs.append(r)
            print(
                f"round {i + 1} {t.cfg.name}: {r['rps']:.0f} req/s, wrk p50 {r['p50']:.2f} ms, "
                f"p99 {r['p99']:.2f} ms, server cpu {p.server:.0f}%, {p}",
                flush=True,
            )
    print(
        f"# latency: http.client keep-alive connection on cpu {args.load_cpu}, "
        f"{args.latency_requests} sequential POSTs after 200 warm-up requests"
    )
    for i in range(args.runs):
        for t in targets:
            lat, p = measured(
                lambda t=t: latency(t.cfg, t.port, args.latency_requests), t.probe, args
            )
            t.lat.append(lat)
            print(
                f"round {i + 1} {t.cfg.name} latency: median {lat[0]:.3f} ms, "
                f"p99 {lat[1]:.3f} ms, {p}",
                flush=True,
            )


def report(targets: list[Target], args: argparse.Namespace) -> None:
    base = targets[0]
    print(
        f"\n{'config':15} {'req/s':>7} {'ratio':>6} {'wrk p50':>8} {'wrk p99':>8} {'srv cpu':>7} "
        f"{'seq p50':>8} {'seq p99':>8}  req/s per round"
    )
    results = {}
    for t in targets:
        med = {k: statistics.median(r[k] for r in t.runs) for k in t.runs[0]}
        ratios = [r["rps"] / b["rps"] for r, b in zip(t.runs, base.runs, strict=True)]
        med["ratio"] = statistics.median(ratios)  # median of the per-round ratios
        med["lat_p50"] = statistics.median(p50 for p50, _ in t.lat)
        med["lat_p99"] = statistics.median(p99 for _, p99 in t.lat)
        med["lat_p99_max"] = max(p99 for _, p99 in t.lat)
        rps = [round(r["rps"]) for r in t.runs]
        results[t.cfg.name] = med | {"rps_all": rps, "lat_all": t.lat}
        print(
            f"{t.cfg.name:15} {med['rps']:7.0f} {med['ratio']:6.2f} {med['p50']:6.2f}ms "
            f"{med['p99']:6.2f}ms {med['cpu']:6.0f}% {med['lat_p50']:6.3f}ms "
            f"{med['lat_p99']:6.3f}ms  {rps}"
        )
    slow = [n for n, m in results.items() if m["lat_p99_max"] >= 5.0]
    print("sequential latency p99 < 5 ms in every run:", f"FAIL {slow}" if slow else "PASS")
    config = {k: v for k, v in vars(args).items() if k not in ("tmp", "procs")}
    print(json.dumps({"args": config, "results": results}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add = parser.add_argument
    add("--server-cpu", type=int, default=0)
    add("--load-cpu", type=int, default=1)
    add("--duration", type=int, default=5, help="seconds per measured wrk run")
    add("--warmup", type=int, default=3, help="seconds of wrk warm-up")
    add("--runs", type=int, default=5, help="measured rounds (>= 3)")
    add("--connections", type=int, default=16)
    add("--latency-requests", type=int, default=2000)
    add("--max-other", type=float, default=10, help="max %% of the server core used by others")
    add("--max-other-load", type=float, default=25, help="the same for the load core")
    add("--attempts", type=int, default=30, help="tries per run to get an undisturbed one")
    add("--quiet-wait", type=float, default=300, help="max s to wait for idle cores before a run")
    add("--only", nargs="*", choices=[c.name for c in CONFIGS])
    args = parser.parse_args()
    git = ["git", "-C", str(ROOT), "describe", "--always", "--dirty"]
    rev = subprocess.run(git, check=False, capture_output=True, text=True)
    print(f"# {time.strftime('%F %T')} git {rev.stdout.strip()} wrk {shutil.which('wrk')}")
    os.sched_setaffinity(0, {args.load_cpu})  # the http.client latency loop runs here
    cfgs = [c for c in CONFIGS if not args.only or c.name in args.only]
    args.procs = []
    with tempfile.TemporaryDirectory() as tmp:
        args.tmp = Path(tmp)
        try:
            targets = start_servers(cfgs, args)
            run_all(targets, args)
        except Exception:
            for log in args.tmp.glob("*.log"):
                print(f"--- {log.name} (tail)\n{log.read_text()[-2000:]}")
            raise
        finally:
            for proc in args.procs:
                proc.terminate()
            for proc in args.procs:
                proc.wait(timeout=30)
    report(targets, args)


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "serve":
        serve(sys.argv[2], int(sys.argv[3]))
    else:
        main()
