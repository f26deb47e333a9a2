"""Settings -> repository -> data plane -> transports; start, serve, drain, stop."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import socket
from collections.abc import Iterator

import uvicorn

from rosettaserve import __version__
from rosettaserve.core.dataplane import DataPlane, ServerInfo
from rosettaserve.core.registry import ModelVersion
from rosettaserve.observability.startup import model_line, say, summary_line
from rosettaserve.protocols.oip import rest as oip_rest
from rosettaserve.repository.manager import ModelRepository
from rosettaserve.settings import Settings
from rosettaserve.transport.http import HttpApp

log = logging.getLogger("rosettaserve")


class _UvicornServer(uvicorn.Server):
    """Uvicorn without its own signal handling: we drain and exit 0 on SIGTERM ourselves."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


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
        info = ServerInfo(
            version=__version__,
            extensions=list(oip_rest.EXTENSIONS),
            strict_readiness=settings.strict_readiness,
        )
        self.dataplane = DataPlane(self.repository, info)
        self.app = HttpApp(oip_rest.routes(self.dataplane), settings.max_request_size)

    async def run(self) -> None:
        s = self.settings
        sock = bind(s.host, s.http_port)
        port = sock.getsockname()[1]
        http = _UvicornServer(
            uvicorn.Config(
                self.app,
                loop="none",
                http="httptools",
                lifespan="off",
                proxy_headers=False,
                server_header=False,
                date_header=False,
                access_log=False,
                log_level="warning",
            )
        )
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self._stop, http)
        serving = asyncio.create_task(http.serve(sockets=[sock]))
        say(f"rosettaserve {__version__}: loading repository {s.repository}")
        await self.repository.load_all()
        say(summary_line(self._all_versions()))
        say(f"http: http://{url_host(s.host)}:{port}")
        self.dataplane.started = True
        poller = None
        if s.poll_interval > 0:
            poller = asyncio.create_task(self.repository.poll_forever(s.poll_interval))
        await serving
        if poller is not None:
            poller.cancel()
        await self.repository.unload_all()
        say("rosettaserve stopped")

    def _stop(self, http: uvicorn.Server) -> None:
        if http.should_exit:
            http.force_exit = True
        http.should_exit = True
        say("rosettaserve: draining in-flight requests, then stopping")

    def _all_versions(self) -> list[ModelVersion]:
        repo = self.repository
        return [v for n in repo.model_names() for v in repo.versions(n) or []]
