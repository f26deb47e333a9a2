"""A model version whose every execution instance is stuck reports not ready, and says why.

A call that outlives its request's timeout is answered 504 at once, but a thread cannot be
stopped: it holds its instance until the model returns. When every instance of a version is
held that way, the version can answer nothing more: it turns UNAVAILABLE (model ready 503,
``properties.reason`` in its metadata, a warning in the log), and READY again once one returns.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable
from time import perf_counter_ns

from rosettaserve.core.registry import ModelVersion, VersionState

log = logging.getLogger("rosettaserve.repository")
WATCH_INTERVAL_S = 0.25
REPEAT_WARNING_S = 30.0  # while a version stays stuck, its warning again this often


async def watch(versions: Callable[[], Iterable[ModelVersion]]) -> None:
    """Check every served version, every ``WATCH_INTERVAL_S``, until cancelled."""
    loop = asyncio.get_running_loop()
    while True:
        await asyncio.sleep(WATCH_INTERVAL_S)
        now = loop.time()
        for mv in versions():
            check(mv, now)


def check(mv: ModelVersion, now: float) -> None:
    """``now``: event loop time, which call deadlines are in."""
    pool = mv.instances
    if pool is None:
        return
    overdue = pool.overdue(now)
    if overdue and len(overdue) >= pool.count:
        _stuck(mv, pool.count, (perf_counter_ns() - min(c.ran for c in overdue)) / 1e9)
    elif mv.stalled_since and mv.state is VersionState.UNAVAILABLE:
        stalled = time.monotonic() - mv.stalled_since
        mv.state, mv.reason, mv.stalled_since = VersionState.READY, "", 0.0
        log.info(
            "model %s version %s is ready again: a stuck call returned after %.1f s unready",
            mv.name,
            mv.version,
            stalled,
        )


def _stuck(mv: ModelVersion, count: int, longest_s: float) -> None:
    reason = (
        f"{f'all {count} execution instances' if count > 1 else 'the one execution instance'}"
        f" of the model {'are' if count > 1 else 'is'} stuck in calls that outlived their "
        f"request timeout (the longest has run {longest_s:.1f} s); "
        "it is ready again when one returns"
    )
    if mv.state is VersionState.READY:
        mv.state, mv.reason, mv.stalled_since = VersionState.UNAVAILABLE, reason, time.monotonic()
        log.warning("model %s version %s is not ready: %s", mv.name, mv.version, reason)
        return
    if not mv.stalled_since or mv.state is not VersionState.UNAVAILABLE:
        return  # not ready for another reason (loading, unloading, failed): left alone
    mv.reason = reason
    stalled = time.monotonic() - mv.stalled_since
    if stalled // REPEAT_WARNING_S != (stalled - WATCH_INTERVAL_S) // REPEAT_WARNING_S:
        log.warning("model %s version %s is still not ready: %s", mv.name, mv.version, reason)
