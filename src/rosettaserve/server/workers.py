"""``--workers N``: a supervisor process and N worker processes sharing the ports.

Each worker is a whole server that loads every model once and binds the HTTP and gRPC ports with
SO_REUSEPORT, so the kernel spreads connections over them and a request never crosses a process
boundary (a front process handing requests to a pool was measured slower: see the README). The
supervisor reserves the ports first (so port 0 means one port for all workers), starts the
workers, prints the addresses once every worker has loaded its models and then lets them report
ready; it forwards SIGTERM and waits for every worker to drain; it starts a worker again if one
dies after start-up; and it sums every worker's metrics for /metrics.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import signal
import sys
from dataclasses import dataclass, replace

from rosettaserve import __version__
from rosettaserve.observability.metrics import Snapshot, metrics_route, render
from rosettaserve.observability.startup import say
from rosettaserve.scheduling.channel import Channel, child_process
from rosettaserve.security.tls import ServerTls
from rosettaserve.server import security_setup as security
from rosettaserve.server.settings import Settings
from rosettaserve.transport.h1 import HttpServer
from rosettaserve.transport.sockets import CannotListen, bind, reserve
from rosettaserve.web.app import HttpApp

log = logging.getLogger("rosettaserve.workers")
RESTART_DELAY_S = 1.0
SNAPSHOT_TIMEOUT_S = 10.0
METRICS_BODY_LIMIT = 1 << 20


@dataclass(eq=False)
class Worker:
    index: int
    proc: asyncio.subprocess.Process
    channel: Channel
    loaded: bool = False
    told_ready: bool = False


def supervise(settings: Settings) -> int:
    import uvloop

    if settings.enable_model_control:
        print(
            "rosettaserve: --enable-model-control needs --workers 1 (a load or unload request "
            "would reach only one worker)",
            file=sys.stderr,
        )
        return 2
    try:
        http = reserve(settings.host, settings.http_port, "--http-port")
        grpc = reserve(settings.host, settings.grpc_port, "--grpc-port")
    except OSError as exc:
        print(f"rosettaserve: cannot start: {exc}", file=sys.stderr)
        return 1
    ports = {"http_port": http.getsockname()[1], "grpc_port": grpc.getsockname()[1]}
    try:
        return uvloop.run(Supervisor(replace(settings, reuse_port=True, **ports)).run())
    except CannotListen as exc:  # --metrics-port
        print(f"rosettaserve: cannot start: {exc}", file=sys.stderr)
        return 1
    finally:
        http.close()
        grpc.close()


class Supervisor:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.workers: dict[int, Worker] = {}
        self.ready = False
        self.failed = False
        self._stopping: asyncio.Event | None = None
        self._replies: dict[int, asyncio.Future[Snapshot]] = {}
        self._ids = itertools.count()
        self._tasks: set[asyncio.Task[None]] = set()
        self.tls: ServerTls | None = None

    async def run(self) -> int:
        s = self.settings
        stopping = self._stopping = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stopping.set)
        self.tls = security.server_tls(s.security)  # the metrics port's; each worker has its own
        security.reload_on_hangup(s.security, self.tls, None, self._hangup)  # keys: each worker
        say(f"rosettaserve {__version__}: loading repository {s.repository} in {s.workers} workers")
        metrics = await self._serve_metrics()
        keepers = [asyncio.create_task(self._keep(i)) for i in range(s.workers)]
        await stopping.wait()
        say("rosettaserve: draining in-flight requests, then stopping")
        for worker in self.workers.values():
            if worker.proc.returncode is None:
                worker.proc.send_signal(signal.SIGTERM)
        await asyncio.gather(*keepers)
        if metrics is not None:
            await metrics.shutdown(timeout=1.0)
        say("rosettaserve stopped")
        return 1 if self.failed else 0

    def _hangup(self) -> None:
        """SIGHUP: every worker reloads its certificate too."""
        for worker in self.workers.values():
            if worker.proc.returncode is None:
                worker.proc.send_signal(signal.SIGHUP)

    async def _keep(self, index: int) -> None:
        """Run worker ``index``; start it again if it dies after the server became ready."""
        assert self._stopping is not None
        while True:
            code = await self._watch(await self._spawn(index))
            if self._stopping.is_set():
                self.failed |= code != 0
                return
            log.error("worker %d exited unexpectedly (code %s)", index, code)
            if not self.ready:  # it could not start: neither will the server
                self.failed = True
                self._stopping.set()
                return
            await asyncio.sleep(RESTART_DELAY_S)
            if self._stopping.is_set():
                return
            log.warning("starting worker %d again", index)

    async def _spawn(self, index: int) -> Worker:
        mine, theirs, cmd = child_process("rosettaserve.server.worker", str(index))
        proc = await asyncio.create_subprocess_exec(*cmd, pass_fds=(theirs.fileno(),))
        theirs.close()
        channel = await Channel.open(mine)
        channel.send("settings", self.settings, self.ready)  # ready: a replacement
        worker = self.workers[index] = Worker(index, proc, channel)
        return worker

    async def _watch(self, worker: Worker) -> int:
        while (message := await worker.channel.receive()) is not None:
            kind = message[0]
            if kind == "loaded":
                worker.loaded = True
                self._announce()
            elif kind == "snapshot":
                reply = self._replies.get(message[1])
                if reply is not None and not reply.done():
                    reply.set_result(message[2])
            elif kind == "collect":
                task = asyncio.create_task(self._answer_collect(worker, message[1]))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)
        worker.channel.close()
        return await worker.proc.wait()

    def _announce(self) -> None:
        """Once every worker has loaded: the addresses (once), then ready to every worker."""
        workers = list(self.workers.values())
        if len(workers) < self.settings.workers or not all(w.loaded for w in workers):
            return
        if not self.ready:
            s, tls = self.settings, self.settings.security.tls
            say(f"http: {security.http_address(s.host, s.http_port, tls)}")
            say(f"grpc: {security.grpc_address(s.host, s.grpc_port, tls)}")
            self.ready = True
        for worker in workers:
            if not worker.told_ready:
                worker.channel.send("ready")
                worker.told_ready = True

    async def _answer_collect(self, worker: Worker, rid: int) -> None:
        worker.channel.send("collected", rid, await self.snapshots())

    async def collect(self) -> bytes:
        """Every live worker's metrics, summed into one exposition."""
        return render(await self.snapshots())

    async def snapshots(self) -> list[Snapshot]:
        """A snapshot from every live worker (those that answer in time)."""
        loop = asyncio.get_running_loop()
        asked: dict[int, asyncio.Future[Snapshot]] = {}
        for worker in self.workers.values():
            if worker.proc.returncode is None:
                rid = next(self._ids)
                asked[rid] = self._replies[rid] = loop.create_future()
                worker.channel.send("snapshot", rid)
        if asked:
            await asyncio.wait(asked.values(), timeout=SNAPSHOT_TIMEOUT_S)
        for rid in asked:
            self._replies.pop(rid, None)
        return [f.result() for f in asked.values() if f.done() and not f.cancelled()]

    async def _serve_metrics(self) -> HttpServer | None:
        port = self.settings.metrics_port
        if port is None:
            return None
        sock = bind(self.settings.host, port, option="--metrics-port")
        server = HttpServer(HttpApp([metrics_route(self.collect)]), METRICS_BODY_LIMIT)
        await server.start(sock, None if self.tls is None else self.tls.http.context)
        address = security.http_address(self.settings.host, sock.getsockname()[1], self.tls)
        say(f"metrics: {address}/metrics")
        return server
