"""``within(awaitable, seconds)``: ``asyncio.wait_for`` without its lost cancel.

Python 3.11's ``wait_for`` answers a cancel that lands in the turn its awaitable finishes with
the awaitable's result (or error) instead: a loop that retries on that error then never ends
(the PD scheduler's readers did, and its SIGTERM drain hung). ``asyncio.timeout`` keeps every
cancel but needs a task of the caller's, and the servers step many handlers themselves (no
task: core/run_at_once.py). ``within`` is that module's bounded wait, ``seconds`` from now: it
needs no task and always passes the caller's cancel on; ruff bans ``wait_for`` in src/
(pyproject.toml).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TypeVar

from rosettaserve.core.run_at_once import bounded

T = TypeVar("T")


async def within(awaitable: Awaitable[T], seconds: float) -> T:
    """``awaitable``'s result; TimeoutError when it takes longer than ``seconds`` (it is then
    cancelled where it waits, and unwinds, as ``wait_for`` does)."""
    return await bounded(awaitable, asyncio.get_running_loop().time() + seconds)
