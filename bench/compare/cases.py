"""The cases and the servers: which cases run with how many connections, the servers under test
(rosettaserve's spec and the peers'), and one repeat of one server: start it, check and measure
each case it serves, read its memory, stop it; likewise the batching MLP (also with busy loops
on the server's core: the contended case) and the startup of the tensor examples.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import importlib
import subprocess
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import rosetta
from answers import GRPC_INFER, check_grpc, check_rest
from bodies import Body, write_lua
from loadgen import Load, h2load, wrk
from measurements import Measurement, Results, ServerRun
from processes import HOST, Server, server_version, settle, start, stop, tree_memory, wait_ready
from spec import (
    CASES,
    GRPC_CASES,
    GRPC_RAW_1MIB,
    GRPC_SMALL,
    GRPC_SMALL_TLS,
    REST_BINARY_1MIB,
    REST_BYTES,
    REST_JSON_1MIB,
    REST_JSON_64X1024,
    REST_SMALL,
    REST_SMALL_TLS,
    TLS_CASES,
    ServerSpec,
)

ROOT = Path(__file__).resolve().parents[2]
BATCHING, BATCHING_CONTENDED, STARTUP = "batching", "batching-contended", "startup"
# cases with servers of their own, measured by bench/ scripts (peer_cases.py)
TORCHSERVE, TFSERVING_GRPC = "torchserve", "tfserving-grpc"
PEER_CASES = (TORCHSERVE, TFSERVING_GRPC)
ALL_CASES = (*CASES, *TLS_CASES, BATCHING, BATCHING_CONTENDED, STARTUP, *PEER_CASES)
# busy-loop processes (bench/cpu_hog.py) on the server's core in the contended batching case
CONTENDED_HOGS = 1
CONTENDED_KEY = "rosettaserve-batching-contended"
# (case, connections) in the order they run
RUNS = (
    (REST_SMALL, 1),
    (REST_SMALL, 16),
    (GRPC_SMALL, 1),
    (GRPC_SMALL, 16),
    (REST_JSON_1MIB, 4),
    (REST_BINARY_1MIB, 4),
    (GRPC_RAW_1MIB, 4),
    (REST_JSON_64X1024, 4),
    (REST_BYTES, 4),
    (REST_SMALL_TLS, 1),
    (REST_SMALL_TLS, 16),
    (GRPC_SMALL_TLS, 1),
    (GRPC_SMALL_TLS, 16),
)
BATCHING_CONNECTIONS = 32


@contextlib.contextmanager
def one_repeat(
    spec: ServerSpec, args: argparse.Namespace, repeat: int, results: Results, load: Load
) -> Iterator[tuple[ServerRun, Server]]:
    """One repeat of one server: started and its startup time recorded; a failure inside is
    recorded on the repeat (its first line) and printed; the server is stopped in any case.

    The measured start is the second: a first one, unmeasured, reads the server's files into
    the page cache (the warm-up of the startup case). This machine evicts files left unread
    for a few minutes, so without it the time would depend on how long ago the server last
    ran: the tensor examples were ready after 3.7 s with nothing cached (after
    ``echo 3 > /proc/sys/vm/drop_caches``), against 1.65 s started again at once."""
    record = ServerRun()
    results.runs.setdefault(spec.key, []).append(record)
    if load.warmup > 0:
        warm = start(spec, args.server_cpu, load.raw / f"r{repeat}-{spec.key}.warm.server.log")
        try:
            wait_ready(warm)
        except RuntimeError:
            pass  # the measured start below fails the same way and records it
        finally:
            stop(warm)
    server = start(spec, args.server_cpu, load.raw / f"r{repeat}-{spec.key}.server.log")
    try:
        record.startup = wait_ready(server)
        yield record, server
    except Exception as exc:
        record.failure = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        print(f"  {spec.key} FAILED: {exc}", flush=True)
    finally:
        stop(server)


def measure_server(
    spec: ServerSpec,
    runs: Sequence[tuple[str, int]],
    bodies: Callable[[ServerSpec, str], Body],
    args: argparse.Namespace,
    *,
    repeat: int,
    results: Results,
    load: Load,
) -> None:
    print(f"[repeat {repeat}] {spec.key}: starting", flush=True)
    with one_repeat(spec, args, repeat, results, load) as (record, server):
        time.sleep(1.0)
        record.idle_rss = tree_memory(server.proc.pid, "VmRSS")
        record.version = server_version(server)
        print(
            f"  ready in {record.startup:.2f} s, idle RSS {record.idle_rss / 1e6:.0f} MB"
            + (f", {record.version}" if record.version else ""),
            flush=True,
        )
        for case, conns in runs:
            key = (spec.key, case, conns)
            tag = f"r{repeat}-{spec.key}-{case}-c{conns}"
            try:
                m = run_case(server, bodies(spec, case), case, conns=conns, load=load, tag=tag)
            except Exception as exc:
                results.fail(key, f"repeat {repeat}: {exc}")
                print(f"  {case} c{conns}: FAILED {exc}", flush=True)
                if server.proc.poll() is not None:
                    raise RuntimeError(f"server exited:\n{server.log_tail()}") from exc
                continue
            results.add(key, m)
            flag = f"  ({m.errors} ERRORS)" if m.errors else ""
            flag += f"  ({m.note})" if m.note else ""
            print(
                f"  {case} c{conns}: {m.rps:.0f} req/s, p50 {m.p50:.2f} ms, p99 {m.p99:.2f} ms"
                + flag,
                flush=True,
            )
        record.peak_rss = tree_memory(server.proc.pid, "VmHWM")


def run_case(
    server: Server, body: Body, case: str, *, conns: int, load: Load, tag: str
) -> Measurement:
    """Check one answer, then a warm-up run and a measured run, each after the server settled."""
    grpc = case in GRPC_CASES
    if grpc:
        wrong, answer_size = check_grpc(server, body)
        url = f"{server.scheme}://{HOST}:{server.grpc_port}{GRPC_INFER}"
    else:
        wrong, answer_size = check_rest(server, body), 0
        url = server.rest_url(f"/v2/models/{body.model}/infer")
    if wrong:
        raise RuntimeError(f"wrong answer: {wrong}")

    def one_run(seconds: int, name: str) -> Measurement:
        waited = settle(server)
        if waited > 1:
            print(f"  (waited {waited:.1f} s for the server to be idle)", flush=True)
        if grpc:
            return h2load(
                load, url, body, conns=conns, seconds=seconds, tag=name, answer_size=answer_size
            )
        assert body.script is not None
        return wrk(load, url, body.script, conns=conns, seconds=seconds, tag=name)

    if load.warmup > 0:
        one_run(load.warmup, tag + "-warmup")
    return one_run(load.duration, tag)


def measure_batching(
    args: argparse.Namespace,
    workdir: Path,
    repeat: int,
    results: Results,
    load: Load,
    *,
    hogs: int = 0,
) -> str:
    """The batching MLP, unbatched then batched; with ``hogs`` busy loops on the server's core
    while wrk runs (the contended case: its own server key, and no ONNX Runtime alone)."""
    import batching_mlp
    from cpu_hog import busy_loops

    spec, data, headers, what = rosetta.batching_setup(workdir)
    if hogs:
        spec = dataclasses.replace(spec, name=f"{spec.name}, contended", key=CONTENDED_KEY)
    path = workdir / "body-batching.bin"
    path.write_bytes(data)
    script = path.with_suffix(".lua")
    write_lua(script, path, headers)
    print(f"[repeat {repeat}] {spec.key}: starting", flush=True)
    with one_repeat(spec, args, repeat, results, load) as (record, server):
        url = server.rest_url("")
        batching_mlp.check_same_answers(url, data, headers)
        for model in rosetta.BATCHING_MODELS:
            key = (spec.key, model, BATCHING_CONNECTIONS)
            tag = f"r{repeat}-{spec.key}-{model}-c{BATCHING_CONNECTIONS}"
            target = f"{url}/v2/models/{model}/infer"
            try:
                if load.warmup > 0:
                    settle(server)
                    with busy_loops(args.server_cpu, hogs):
                        wrk(
                            load,
                            target,
                            script,
                            conns=BATCHING_CONNECTIONS,
                            seconds=load.warmup,
                            tag=tag + "-w",
                        )
                settle(server)
                with busy_loops(args.server_cpu, hogs):
                    m = wrk(
                        load,
                        target,
                        script,
                        conns=BATCHING_CONNECTIONS,
                        seconds=load.duration,
                        tag=tag,
                    )
            except Exception as exc:
                results.fail(key, f"repeat {repeat}: {exc}")
                print(f"  {model}: FAILED {exc}", flush=True)
                continue
            results.add(key, m)
            mean = batching_mlp.mean_batch(url, model)
            results.batch_size.setdefault(f"{spec.key}/{model}", []).append(mean)
            print(
                f"  {model}: {m.rps:.0f} req/s, p50 {m.p50:.2f} ms, p99 {m.p99:.2f} ms", flush=True
            )
        record.peak_rss = tree_memory(server.proc.pid, "VmHWM")
    if hogs:
        return what + f"; {hogs} busy-loop process(es) pinned to the server's core while wrk runs"
    try:  # the server has stopped: the core is ONNX Runtime's alone
        for rows, us in rosetta.ort_alone(workdir, args.server_cpu).items():
            results.ort_alone.setdefault(rows, []).append(us)
    except (OSError, subprocess.SubprocessError, ValueError, KeyError) as exc:
        print(f"  bench/ort_alone.py FAILED: {exc}", flush=True)
    return what


def measure_startup(
    args: argparse.Namespace, spec: ServerSpec, repeat: int, results: Results, load: Load
) -> None:
    with one_repeat(spec, args, repeat, results, load) as (record, server):
        time.sleep(1.0)
        record.idle_rss = tree_memory(server.proc.pid, "VmRSS")
        record.peak_rss = tree_memory(server.proc.pid, "VmHWM")
        print(
            f"[repeat {repeat}] {spec.key}: ready in {record.startup:.2f} s, "
            f"idle RSS {record.idle_rss / 1e6:.0f} MB",
            flush=True,
        )


# -- the servers -------------------------------------------------------------------------------


def all_specs(workdir: Path) -> tuple[list[ServerSpec], str]:
    """rosettaserve's spec and the peers' (bench/compare/peers.py), and a note on the peers."""
    specs = [rosetta.rosetta_spec(workdir), rosetta.rosetta_tls_spec(workdir)]
    try:
        peers = importlib.import_module("peers")
    except ImportError as exc:
        return specs, f"peers not available (bench/compare/peers.py: {exc}); rosettaserve only"
    try:
        found = list(peers.peer_specs(ROOT))
    except Exception as exc:
        return specs, f"peers skipped: peer_specs failed: {exc}"
    return specs + [s for s in found if isinstance(s, ServerSpec)], ""
