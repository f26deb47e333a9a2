"""The one place blocking work leaves the event loop."""

from __future__ import annotations

import asyncio
import contextvars
import functools
import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import ParamSpec, TypeVar

P = ParamSpec("P")
T = TypeVar("T")

_pool: ThreadPoolExecutor | None = None


def _executor() -> ThreadPoolExecutor:
    global _pool  # noqa: PLW0603 - one process-wide pool, created lazily
    if _pool is None:
        workers = int(os.environ.get("ROSETTASERVE_THREADS", "0")) or min(
            32, (os.cpu_count() or 1) + 4
        )
        _pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="rosetta-model")
    return _pool


async def run_blocking(fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    """Run ``fn`` on the model thread pool and await its result."""
    loop = asyncio.get_running_loop()
    ctx = contextvars.copy_context()
    call = functools.partial(ctx.run, fn, *args, **kwargs)
    return await loop.run_in_executor(_executor(), call)
