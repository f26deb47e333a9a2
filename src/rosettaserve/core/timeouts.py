"""``within(awaitable, seconds)``: ``asyncio.wait_for`` without its lost cancel.

Python 3.11's ``wait_for`` answers a cancel that lands in the turn its awaitable finishes with
the awaitable's result (or error) instead: a loop that retries on that error then never ends
(the PD scheduler's readers did, and its SIGTERM drain hung). ``asyncio.timeout`` keeps every
cancel but needs a task of the caller's, and the HTTP server steps many handlers itself (no
task). ``within`` needs none and always passes the caller's cancel on; ruff bans ``wait_for``
in src/ (pyproject.toml).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TypeVar

T = TypeVar("T")


async def within(awaitable: Awaitable[T], seconds: float) -> T:
    """``awaitable``'s result; TimeoutError when it takes longer than ``seconds`` (it is then
    cancelled, and waited for, as ``wait_for`` does)."""
    inner = asyncio.ensure_future(awaitable)
    timed_out = False
    try:
        await asyncio.wait((inner,), timeout=seconds)
        if not inner.done():
            timed_out = inner.cancel()
            await asyncio.wait((inner,))
    except asyncio.CancelledError:
        inner.cancel()
        raise
    if timed_out and inner.cancelled():
        raise TimeoutError
    return inner.result()
