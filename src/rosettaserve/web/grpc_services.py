"""The gRPC vocabulary that belongs to no server: the method table a protocol declares for its
service, and the tracker of calls at work that its servicer and the gRPC server share."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

# service name -> (servicer, {rpc name: (request type, response type, streaming)});
# streaming: False unary, True a stream each way, "server" one request and a stream of replies,
# "subscription" the same for a stream that waits for events (grpc.health.v1's Watch): not
# counted as work, so a stop does not wait for it (the close ends it);
# a type given as ``bytes``: the servicer takes or returns the serialized message itself
ServiceTable = tuple[str, Any, Mapping[str, tuple[Any, Any, bool | str]]]


class CallTracker:
    """Counts calls doing work, so shutdown waits for them but not for idle open streams."""

    def __init__(self) -> None:
        self.active = 0

    def busy(self) -> CallTracker:
        """``with tracker.busy():`` counts a call doing work (the tracker is its own context
        manager: cheaper per call than a generator-based one)."""
        return self

    def __enter__(self) -> None:
        self.active += 1

    def __exit__(self, *exc: object) -> None:
        self.active -= 1

    async def wait_idle(self, timeout: float) -> None:
        deadline = asyncio.get_running_loop().time() + timeout
        while self.active and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.01)
