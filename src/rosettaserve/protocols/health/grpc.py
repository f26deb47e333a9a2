"""grpc.health.v1.Health: ``Check`` and ``Watch``, SERVING while the server is ready.

The services known are "" (the server as a whole) and each gRPC service served. ``Check``
answers the status now (an unknown service: NOT_FOUND). ``Watch``, as the health checking
protocol says, sends the status at once and then each change, and does not end on its own; an
unknown service gets SERVICE_UNKNOWN and its call stays open. While a ``Watch`` is open, one
task looks at the server's readiness every ``POLL_S`` (however many watch) and wakes the
watchers when it changed. ``enter_graceful_shutdown`` (grpcio's servicer has the same) turns
every known service NOT_SERVING for good and tells the watchers before the port closes.

A ``Watch`` is a "subscription" for the transport: it is not counted as work, so a shutdown
does not wait for it, and a client that leaves ends it (its place among the watchers freed).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from rosettaserve.core.dataplane import DataPlane
from rosettaserve.core.errors import NotFound
from rosettaserve.protocols.health.pb import health_pb2 as pb

SERVICE = "grpc.health.v1.Health"
Status = pb.HealthCheckResponse.ServingStatus
POLL_S = 0.5  # how often readiness is looked at while a Watch is open
SHUTDOWN_NOTICE_S = 1.0  # the longest a shutdown waits for the watchers to be told


class Watcher:
    """One open ``Watch``: its service, the status it was last sent, its wake-up."""

    __slots__ = ("sent", "service", "wake")

    def __init__(self, service: str) -> None:
        self.service = service
        self.sent = Status.UNKNOWN  # nothing sent yet (UNKNOWN is never a status sent)
        self.wake = asyncio.Event()


class HealthServicer:
    def __init__(self, dp: DataPlane, services: list[str], poll_s: float = POLL_S) -> None:
        self.dp = dp
        self.services = {"", *services}  # "" asks about the server as a whole
        self.poll_s = poll_s
        self.shutting_down = False
        self.watchers: set[Watcher] = set()
        self._serving = False  # as last looked at (``_refresh``)
        self._poller: asyncio.Task[None] | None = None

    def status(self, service: str) -> Any:
        if service not in self.services:
            return Status.SERVICE_UNKNOWN
        return Status.SERVING if self._serving else Status.NOT_SERVING

    async def Check(self, request: Any, context: Any) -> Any:
        if request.service not in self.services:
            raise NotFound(f"unknown service '{request.service[:200]}'")
        self._refresh()
        return pb.HealthCheckResponse(status=self.status(request.service))

    async def Watch(self, request: Any, context: Any) -> AsyncIterator[Any]:
        watcher = Watcher(request.service)
        self.watchers.add(watcher)
        try:
            self._refresh()
            self._poll()
            while True:
                status = self.status(watcher.service)
                if status != watcher.sent:
                    yield pb.HealthCheckResponse(status=status)
                    watcher.sent = status  # resumed: the transport has taken it
                await watcher.wake.wait()
                watcher.wake.clear()
        finally:
            self.watchers.discard(watcher)

    async def enter_graceful_shutdown(self, timeout: float = SHUTDOWN_NOTICE_S) -> None:
        """NOT_SERVING from now on; returns once every watcher was sent its new status (or
        after ``timeout``: a client that reads nothing is not waited for longer)."""
        self.shutting_down = True
        self._refresh()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while loop.time() < deadline and any(
            w.sent != self.status(w.service) for w in self.watchers
        ):
            await asyncio.sleep(0.01)

    def _refresh(self) -> None:
        """Look at readiness; wake the watchers when it changed."""
        serving = not self.shutting_down and self.dp.ready()
        if serving != self._serving:
            self._serving = serving
            for watcher in self.watchers:
                watcher.wake.set()

    def _poll(self) -> None:
        if self._poller is None or self._poller.done():
            self._poller = asyncio.get_running_loop().create_task(self._polling())

    async def _polling(self) -> None:
        while self.watchers and not self.shutting_down:
            await asyncio.sleep(self.poll_s)
            self._refresh()


RPCS: dict[str, tuple[Any, Any, bool | str]] = {
    "Check": (pb.HealthCheckRequest, pb.HealthCheckResponse, False),
    "Watch": (pb.HealthCheckRequest, pb.HealthCheckResponse, "subscription"),
}
