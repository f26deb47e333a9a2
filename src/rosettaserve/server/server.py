"""Settings -> repository -> data plane -> transports; start, serve, drain, stop."""

from __future__ import annotations

import asyncio
import logging
import signal
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rosettaserve import __version__
from rosettaserve.core.dataplane import DataPlane, Limits, ServerInfo
from rosettaserve.core.generation_plane import GenerationPlane
from rosettaserve.core.model import Model
from rosettaserve.core.model_calls import ModelCalls
from rosettaserve.core.registry import ModelVersion
from rosettaserve.observability import status_doc, status_page, tracing
from rosettaserve.observability.access_log import AccessLog, access_logged
from rosettaserve.observability.http_edge import HttpEdge
from rosettaserve.observability.log_settings import LogSettings
from rosettaserve.observability.metrics import Metrics, Snapshot, metrics_route, render
from rosettaserve.observability.startup import model_line, say, summary_line
from rosettaserve.observability.trace_settings import TraceSettings
from rosettaserve.observability.trend import Trend
from rosettaserve.pd.instance import PdInstance
from rosettaserve.protocols import families, pooling
from rosettaserve.protocols.grps import grpc as grps_grpc
from rosettaserve.protocols.grps import rest as grps_rest
from rosettaserve.protocols.grps.api import GrpsApi
from rosettaserve.protocols.health import grpc as health_grpc
from rosettaserve.protocols.oip import grpc as oip_grpc
from rosettaserve.protocols.oip import rest as oip_rest
from rosettaserve.protocols.oip import settings as oip_settings
from rosettaserve.protocols.oip import shared_memory as oip_shm
from rosettaserve.protocols.tfserving import grpc as tfserving_grpc
from rosettaserve.protocols.tfserving import rest as tfserving_rest
from rosettaserve.protocols.torchserve import management as torchserve_management
from rosettaserve.protocols.torchserve import rest as torchserve_rest
from rosettaserve.repository.config import ModelConfig
from rosettaserve.repository.manager import ModelRepository
from rosettaserve.repository.watchdog import watch
from rosettaserve.runtimes import create_model
from rosettaserve.scheduling.response_cache import ResponseCache
from rosettaserve.server import exit_backstop, gc_tuning
from rosettaserve.server import security_setup as security
from rosettaserve.server.settings import Settings, body_pace, http_limits
from rosettaserve.transport.grpc import GrpcServer
from rosettaserve.transport.h1 import HttpServer
from rosettaserve.transport.sockets import bind
from rosettaserve.web.app import App, HttpApp
from rosettaserve.web.cors import Cors
from rosettaserve.web.grpc_services import CallTracker, ServiceTable
from rosettaserve.web.routing import Route

if TYPE_CHECKING:
    from rosettaserve.server.worker import WorkerLink

log = logging.getLogger("rosettaserve")


class Server:
    def __init__(self, settings: Settings, link: WorkerLink | None = None) -> None:
        self.settings = settings
        self.link = link  # set: one worker of several (--workers); worker 0 prints the models
        self.quiet = link is not None and (link.index > 0 or link.replacement)
        self.repository = ModelRepository(
            settings.repository,
            self._create_model,  # the runtimes build each version's model
            report=None if self.quiet else lambda vs: say(model_line(vs)),
            cache=ResponseCache(settings.cache_size) if settings.cache_size else None,
            demand=settings.demand,
        )
        control = settings.enable_model_control
        info = ServerInfo(
            version=__version__,
            extensions=oip_rest.extensions(control, settings.allow_client_shm and link is None),
            strict_readiness=settings.strict_readiness,
        )
        limits = Limits(settings.max_queue_size, settings.request_timeout_us)
        # waker: versions that load on demand (load: lazy, unloaded when idle or evicted)
        self.dataplane = DataPlane(
            self.repository,
            info,
            self.repository if control else None,
            limits,
            self.repository.wake,
        )
        self.dataplane.answers_cached = bool(settings.cache_size)
        self.model_calls = ModelCalls(self.dataplane)  # models calling models (BLS, ensembles)
        self.metrics = Metrics()
        self.dataplane.observer = self.metrics
        self.generation = GenerationPlane(  # the LLM families' plane
            self.dataplane,
            trust_request_chat_template=settings.trust_request_chat_template,
            responses_store=settings.responses_store,
        )
        self.generation.observer = self.metrics
        oip_shm.REGIONS.refusal = oip_shm.refusal(settings.allow_client_shm, link is not None)
        self.app = HttpApp(self._http_routes(settings, control))
        self.guard = security.guard(settings.security)
        self.app.guard = self.guard
        self.app.max_inflated = settings.max_request_size
        # what the HTTP port answers with: the app, or the app with request ids, access lines
        # and CORS around it (none of it when the access log and CORS are off)
        logged = access_logged(settings.access_log, settings.log_level)
        self.access = AccessLog() if logged else None
        cors = Cors(settings.cors_origins) if settings.cors_origins else None
        self.http_app: App = self.app
        if self.access is not None or cors is not None:
            self.http_app = HttpEdge(self.app, self.access, cors)
        # OpenTelemetry spans (--otel-exporter): off, none of it is imported or installed
        self.tracing = (
            None
            if settings.otel_exporter == "none"
            else tracing.Tracing(settings.otel_exporter, self.traces)
        )
        if self.tracing is not None:
            self.http_app = self.tracing.http(self.http_app)
            self.dataplane.observer = self.tracing.observer(self.metrics)
        self.tls = security.server_tls(settings.security)
        self._stopping = asyncio.Event()
        self.http_url = ""
        self.grpc_address = ""
        self.metrics_url = ""  # set: --metrics-port, served by this process
        self.calls = CallTracker()
        names = [oip_grpc.SERVICE, grps_grpc.SERVICE, *tfserving_grpc.SERVICES]
        self.health = health_grpc.HealthServicer(self.dataplane, names)  # grpc.health.v1

    def _settings_routes(self, settings: Settings) -> list[Route]:
        """Triton's logging and trace extensions: this process's settings, changed at run
        time (the trace settings decide what --otel-exporter traces)."""
        self.logs = LogSettings(settings.log_level, settings.log_format, worker_tag(self.link))
        self.traces = TraceSettings(exporting=settings.otel_exporter != "none")
        return oip_settings.logging_routes(self.logs) + oip_settings.trace_routes(
            self.dataplane, self.traces
        )

    def _grpc_server(self) -> GrpcServer:
        s = self.settings
        services: list[ServiceTable] = [
            (
                oip_grpc.SERVICE,
                oip_grpc.OipServicer(self.dataplane, self.calls, self.logs, self.traces),
                oip_grpc.RPCS,
            ),
            (health_grpc.SERVICE, self.health, health_grpc.RPCS),
            (grps_grpc.SERVICE, grps_grpc.GrpsServicer(self.grps), grps_grpc.RPCS),
            *tfserving_grpc.services(self.dataplane),
        ]
        server = GrpcServer(
            services, s.grpc_max_message_size, self.calls, s.send_timeout, body_pace(s)
        )
        server.guard = self.guard
        server.call_lines = None if self.access is None else self.access.call_lines()
        server.tracing = self.tracing
        return server

    def _http_routes(self, settings: Settings, control: bool) -> list[Route]:
        """Every protocol's routes on the HTTP port (TorchServe's management API: unless it
        has its own port)."""
        self.grps = GrpsApi(self.dataplane, settings.grps_default_model)
        routes = oip_rest.routes(self.dataplane) + grps_rest.routes(self.grps)
        # the LLM API families (OpenAI, TGI, vLLM, Triton's generate, MindIE), served whole;
        # a PD role (--role prefill|decode) wraps their POST routes and adds its own
        peers = security.peer_client(settings.security)
        self.pd = PdInstance(settings.role, settings.pd, self.generation, peers)
        routes += self.pd.wrap(families.routes(self.generation)) + self.pd.routes()
        # embeddings and rerank (tensor models); Triton's logging and trace extensions
        routes += pooling.routes(self.dataplane) + self._settings_routes(settings)
        self.trend = Trend(self.snapshots)  # grps's monitor series, sampled once asked
        routes += status_page.routes(self.status) + grps_rest.monitor_routes(self.trend)
        if settings.metrics_port is None:
            routes.append(metrics_route(self.metrics_text))
        defaults: dict[str, str] = {}  # TorchServe's set-default choices, by model
        routes += torchserve_rest.routes(self.dataplane, defaults)
        # TorchServe's management API (the repository is its model store): on the HTTP port,
        # or only on --management-port
        self.management = (
            torchserve_management.routes(self.dataplane, settings.repository, defaults)
            if control
            else []
        )
        if settings.management_port is None:
            routes += self.management
        return routes + tfserving_rest.routes(self.dataplane)

    def _create_model(self, name: str, version: str, path: Path, config: ModelConfig) -> Model:
        model = create_model(name, version, path, config)
        model.calls = self.model_calls
        return model

    async def run(self) -> None:
        s = self.settings
        self.model_calls.bind()
        preloaded = await self._join_workers()
        sock = bind(s.host, s.http_port, s.reuse_port, "--http-port")
        tls = self.tls
        self.http_url = security.http_address(s.host, sock.getsockname()[1], tls)
        self.pd.bound(s.host, sock.getsockname()[1])
        http = HttpServer(self.http_app, s.max_request_size, limits=http_limits(s))
        http.access = self.access
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self._stopping.set)
        exit_backstop.arm((signal.SIGTERM, signal.SIGINT), s.drain_grace_s)  # a blocked loop
        security.reload_on_hangup(s.security, tls, self.guard)
        await http.start(sock, None if tls is None else tls.http.context)
        grpc_server = self._grpc_server()
        grpc_sock = bind(s.host, s.grpc_port, s.reuse_port, "--grpc-port")
        self.grpc_address = security.grpc_address(s.host, grpc_sock.getsockname()[1], tls)
        await grpc_server.start(grpc_sock, None if tls is None else tls.grpc.context)
        metrics = await self._start_metrics()
        management = await self._start_management()
        if self.link is None:
            say(f"rosettaserve {__version__} ({s.role}): loading repository {s.repository}")
        loading = asyncio.create_task(self._load(preloaded))
        # stuck models, and models that make no progress while work waits: not ready
        watching = asyncio.create_task(watch(self._all_versions, s.stall_timeout_s))
        idling = asyncio.create_task(self.repository.unload_idle_forever())
        await self._stopping.wait()
        if self.link is None:
            say("rosettaserve: draining in-flight requests, then stopping")
        loading.cancel()
        watching.cancel()
        idling.cancel()
        grace = s.drain_grace_s  # then the server stops, even with model calls stuck
        deadline = time.monotonic() + grace
        await self.health.enter_graceful_shutdown()  # Watch: NOT_SERVING before the port closes
        await asyncio.gather(http.shutdown(grace), grpc_server.stop(grace), self.pd.drain(grace))
        for side in (metrics, management):
            if side is not None:
                await side.shutdown(timeout=1.0)
        await self.repository.unload_all(deadline)
        if self.tracing is not None:
            self.tracing.shutdown()
        if self.link is None:
            say("rosettaserve stopped")

    async def _join_workers(self) -> bool:
        """A worker links up with the supervisor; a replacement for a worker that died loads its
        models before it listens, so that it takes no connection it cannot serve."""
        if self.link is None:
            return False
        await self.link.start(self.snapshot, self._stopping.set)
        if self.link.replacement:
            await self.repository.load_all()
        return self.link.replacement

    async def _load(self, preloaded: bool = False) -> None:
        if not preloaded:
            await self.repository.load_all()
        if not self.quiet:
            say(summary_line(self._all_versions()))
        if self.link is None:
            say(f"http: {self.http_url}")
            say(f"grpc: {self.grpc_address}")
        else:  # the supervisor prints the addresses once every worker has loaded
            await self.link.loaded()
        self.dataplane.started = True
        gc_tuning.settle()
        if self.settings.poll_interval > 0:
            await self.repository.poll_forever(self.settings.poll_interval)

    def snapshot(self) -> Snapshot:
        return self.metrics.snapshot(self._all_versions())

    async def snapshots(self) -> list[Snapshot]:
        """What /metrics, the status page and grps's monitor read: this process's snapshot, or
        with --workers every worker's."""
        return [self.snapshot()] if self.link is None else await self.link.snapshots()

    async def status(self) -> dict[str, Any]:
        s = self.settings
        metrics = self.metrics_url or f"{self.http_url}/metrics"
        if not self.metrics_url and s.metrics_port is not None:  # the supervisor's
            metrics = f"port {s.metrics_port}"
        endpoints = {"http": self.http_url, "grpc": self.grpc_address, "metrics": metrics}
        facts = status_page.server_facts(__version__, s.role, s.workers, endpoints)
        return status_doc.document(await self.snapshots(), self._all_versions(), facts)

    async def metrics_text(self) -> bytes:
        return render([self.snapshot()]) if self.link is None else await self.link.collect()

    async def _start_metrics(self) -> HttpServer | None:
        """``--metrics-port``: /metrics on a port of its own (the supervisor's, with workers)."""
        port = self.settings.metrics_port
        if port is None or self.link is not None:
            return None
        sock = bind(self.settings.host, port, option="--metrics-port")
        server = HttpServer(HttpApp([metrics_route(self.metrics_text)]), 1 << 20)
        await server.start(sock, None if self.tls is None else self.tls.http.context)
        address = security.http_address(self.settings.host, sock.getsockname()[1], self.tls)
        self.metrics_url = f"{address}/metrics"
        say(f"metrics: {self.metrics_url}")
        return server

    async def _start_management(self) -> HttpServer | None:
        """``--management-port``: TorchServe's management API there only, behind the same
        keys (one process: model control needs --workers 1)."""
        port = self.settings.management_port
        if port is None:
            return None
        sock = bind(self.settings.host, port, option="--management-port")
        app = HttpApp(self.management)
        app.guard = self.guard
        server = HttpServer(app, self.settings.max_request_size, limits=http_limits(self.settings))
        server.access = self.access
        await server.start(sock, None if self.tls is None else self.tls.http.context)
        address = security.http_address(self.settings.host, sock.getsockname()[1], self.tls)
        say(f"management: {address}")
        return server

    def _all_versions(self) -> list[ModelVersion]:
        repo = self.repository
        return [v for n in repo.model_names() for v in repo.versions(n) or []]


def worker_tag(link: WorkerLink | None) -> str:
    """What a worker's log lines carry (``logging_setup.configure``'s tag): "" without workers."""
    return f"worker {link.index}" if link is not None else ""
