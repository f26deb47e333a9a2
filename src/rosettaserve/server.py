"""Settings -> repository -> data plane -> transports; start, serve, drain, stop."""

from __future__ import annotations

import asyncio
import logging
import signal
import socket

import grpc

from rosettaserve import __version__
from rosettaserve.core.dataplane import DataPlane, ServerInfo
from rosettaserve.core.registry import ModelVersion
from rosettaserve.observability.startup import model_line, say, summary_line
from rosettaserve.protocols.grps import grpc as grps_grpc
from rosettaserve.protocols.grps import rest as grps_rest
from rosettaserve.protocols.grps.api import GrpsApi
from rosettaserve.protocols.health import grpc as health_grpc
from rosettaserve.protocols.mindie import rest as mindie_rest
from rosettaserve.protocols.oip import grpc as oip_grpc
from rosettaserve.protocols.oip import rest as oip_rest
from rosettaserve.protocols.openai import rest as openai_rest
from rosettaserve.protocols.tfserving import rest as tfserving_rest
from rosettaserve.protocols.tgi import rest as tgi_rest
from rosettaserve.protocols.triton_generate import rest as triton_generate_rest
from rosettaserve.repository.manager import ModelRepository
from rosettaserve.settings import Settings
from rosettaserve.transport.grpc import CallTracker, ServiceTable, build_server
from rosettaserve.transport.h1 import HttpServer
from rosettaserve.transport.http import HttpApp

log = logging.getLogger("rosettaserve")
DRAIN_GRACE_S = 60.0
LLM_FAMILIES = (openai_rest, tgi_rest, triton_generate_rest, mindie_rest)  # vLLM: in tgi_rest


def bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(2048)
    sock.setblocking(False)
    return sock


def url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host


class Server:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.repository = ModelRepository(
            settings.repository, report=lambda vs: say(model_line(vs))
        )
        control = settings.enable_model_control
        info = ServerInfo(
            version=__version__,
            extensions=oip_rest.extensions(model_control=control),
            strict_readiness=settings.strict_readiness,
        )
        self.dataplane = DataPlane(self.repository, info, self.repository if control else None)
        self.grps = GrpsApi(self.dataplane, settings.grps_default_model)
        routes = oip_rest.routes(self.dataplane) + grps_rest.routes(self.grps)
        routes += [r for family in LLM_FAMILIES for r in family.routes(self.dataplane)]
        self.app = HttpApp(routes + tfserving_rest.routes(self.dataplane))
        self._stopping = asyncio.Event()
        self.http_url = ""
        self.grpc_address = ""
        self.calls = CallTracker()

    def _grpc_server(self) -> grpc.aio.Server:
        s = self.settings
        names = [oip_grpc.SERVICE, grps_grpc.SERVICE]
        services: list[ServiceTable] = [
            (oip_grpc.SERVICE, oip_grpc.OipServicer(self.dataplane, self.calls), oip_grpc.RPCS),
            (
                health_grpc.SERVICE,
                health_grpc.HealthServicer(self.dataplane, names),
                health_grpc.RPCS,
            ),
            (grps_grpc.SERVICE, grps_grpc.GrpsServicer(self.grps), grps_grpc.RPCS),
        ]
        server = build_server(services, s.grpc_max_message_size, self.calls)
        port = server.add_insecure_port(f"{url_host(s.host)}:{s.grpc_port}")
        self.grpc_address = f"{url_host(s.host)}:{port}"
        return server

    async def run(self) -> None:
        s = self.settings
        sock = bind(s.host, s.http_port)
        self.http_url = f"http://{url_host(s.host)}:{sock.getsockname()[1]}"
        http = HttpServer(self.app, s.max_request_size)
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self._stopping.set)
        await http.start(sock)
        grpc_server = self._grpc_server()
        await grpc_server.start()
        say(f"rosettaserve {__version__}: loading repository {s.repository}")
        loading = asyncio.create_task(self._load())
        await self._stopping.wait()
        say("rosettaserve: draining in-flight requests, then stopping")
        loading.cancel()
        await asyncio.gather(http.shutdown(), self._stop_grpc(grpc_server))
        await self.repository.unload_all()
        say("rosettaserve stopped")

    async def _stop_grpc(self, server: grpc.aio.Server) -> None:
        """Refuse new calls, let calls at work finish, then close streams left open and idle."""
        stopping = asyncio.create_task(server.stop(grace=DRAIN_GRACE_S))
        await self.calls.wait_idle(DRAIN_GRACE_S)
        await server.stop(grace=0)
        await stopping

    async def _load(self) -> None:
        await self.repository.load_all()
        say(summary_line(self._all_versions()))
        say(f"http: {self.http_url}")
        say(f"grpc: {self.grpc_address}")
        self.dataplane.started = True
        if self.settings.poll_interval > 0:
            await self.repository.poll_forever(self.settings.poll_interval)

    def _all_versions(self) -> list[ModelVersion]:
        repo = self.repository
        return [v for n in repo.model_names() for v in repo.versions(n) or []]
