"""Closing connections left idle, and late ones: one timer for a server rather than one per
connection re-armed on every request. The HTTP/1.1 server also answers 408 to a late request
head or body from this sweep (``h1.Connection.close_if_idle``), so it sweeps as often as its
shortest timeout asks."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable
from typing import Protocol


class Idling(Protocol):
    def close_if_idle(self, since: float) -> None:
        """Close it if it is doing nothing and nothing arrived after ``since`` (a connection
        with deadlines of its own may check them here instead)."""


async def sweep(connections: Iterable[Idling], idle_timeout: float) -> None:
    """Every quarter of ``idle_timeout``, ask each connection to close if idle for longer than
    ``idle_timeout``, until cancelled."""
    interval = max(idle_timeout / 4, 0.01)
    while True:
        await asyncio.sleep(interval)
        since = time.monotonic() - idle_timeout
        for conn in list(connections):
            conn.close_if_idle(since)
