"""grpc.health.v1.Health's servicer on its own: Check and Watch over a data plane whose
readiness the test turns on and off (the transport's part: tests/unit/transport)."""

from __future__ import annotations

import asyncio

import pytest

from rosettaserve.core.errors import NotFound
from rosettaserve.protocols.health.grpc import HealthServicer, Status
from rosettaserve.protocols.health.pb import health_pb2 as pb

SERVICES = ["inference.GRPCInferenceService"]


class Plane:
    def __init__(self) -> None:
        self.is_ready = True

    def ready(self) -> bool:
        return self.is_ready


def servicer(plane: Plane) -> HealthServicer:
    return HealthServicer(plane, SERVICES, poll_s=0.001)  # type: ignore[arg-type]


class Watch:
    """A Watch read as the transport reads a stream: each reply taken as soon as it comes (the
    servicer resumes once its reply is taken), into ``received``."""

    def __init__(self, health: HealthServicer, service: str) -> None:
        self.replies = health.Watch(pb.HealthCheckRequest(service=service), None)
        self.received: asyncio.Queue[int] = asyncio.Queue()
        self.task = asyncio.ensure_future(self._read())

    async def _read(self) -> None:
        async for reply in self.replies:
            self.received.put_nowait(int(reply.status))

    async def next(self) -> int:
        return await self.received.get()

    async def close(self) -> None:
        """What the transport does when the call ends: the servicer's stream is closed."""
        self.task.cancel()
        await asyncio.gather(self.task, return_exceptions=True)
        await self.replies.aclose()  # type: ignore[attr-defined]


def test_watch_sends_the_status_then_each_change() -> None:
    async def main() -> None:
        plane = Plane()
        health = servicer(plane)
        watching = Watch(health, "")
        assert await watching.next() == Status.SERVING
        plane.is_ready = False
        assert await watching.next() == Status.NOT_SERVING
        plane.is_ready = True
        assert await watching.next() == Status.SERVING
        await watching.close()

    asyncio.run(main())


def test_watch_of_an_unknown_service_is_service_unknown_and_stays_open() -> None:
    async def main() -> None:
        plane = Plane()
        health = servicer(plane)
        unknown, known = Watch(health, "no.such.Service"), Watch(health, SERVICES[0])
        assert await unknown.next() == Status.SERVICE_UNKNOWN
        assert await known.next() == Status.SERVING
        plane.is_ready = False
        assert await known.next() == Status.NOT_SERVING  # the change reached the watchers
        await health.enter_graceful_shutdown()
        assert unknown.received.empty()  # nothing more for the unknown service,
        assert not unknown.task.done()  # and its call still open
        await unknown.close()
        await known.close()
        with pytest.raises(NotFound):
            await health.Check(pb.HealthCheckRequest(service="no.such.Service"), None)

    asyncio.run(main())


def test_shutdown_tells_every_watcher_not_serving_before_it_returns() -> None:
    async def main() -> None:
        health = servicer(Plane())
        watchers = [Watch(health, service) for service in ("", SERVICES[0], "")]
        for watching in watchers:
            assert await watching.next() == Status.SERVING
        await health.enter_graceful_shutdown(timeout=60.0)
        # returned as soon as each was sent its status, not after the timeout: it is there
        assert [w.received.get_nowait() for w in watchers] == [Status.NOT_SERVING] * 3
        check = await health.Check(pb.HealthCheckRequest(service=""), None)
        assert check.status == Status.NOT_SERVING
        late = Watch(health, "")
        assert await late.next() == Status.NOT_SERVING
        for watching in [*watchers, late]:
            await watching.close()

    asyncio.run(main())


def test_a_watch_that_ends_leaves_the_watchers_and_the_poller_stops() -> None:
    async def main() -> None:
        plane = Plane()
        health = servicer(plane)
        first, second = Watch(health, ""), Watch(health, "")
        await first.next()
        await second.next()
        assert len(health.watchers) == 2
        await first.close()
        assert len(health.watchers) == 1
        await second.close()
        assert not health.watchers
        poller = health._poller
        assert poller is not None
        await poller  # it ends once nobody watches
        plane.is_ready = False
        check = await health.Check(pb.HealthCheckRequest(service=""), None)
        assert check.status == Status.NOT_SERVING  # Check looks at readiness itself

    asyncio.run(main())
