"""Closing connections left idle: one timer for a server rather than one per connection re-armed
on every request."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable
from typing import Protocol


class Idling(Protocol):
    def close_if_idle(self, since: float) -> None:
        """Close it if it is doing nothing and nothing arrived after ``since``."""


async def sweep(connections: Iterable[Idling], idle_timeout: float) -> None:
    """Close connections idle for longer than ``idle_timeout`` (give or take a quarter of it),
    until cancelled."""
    interval = max(idle_timeout / 4, 0.01)
    while True:
        await asyncio.sleep(interval)
        since = time.monotonic() - idle_timeout
        for conn in list(connections):
            conn.close_if_idle(since)
