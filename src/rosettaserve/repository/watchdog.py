"""Readiness that tells the truth: a model version that cannot answer reports not ready, and
says why, until it can again.

- Stuck instances: a call that outlives its request's timeout is answered 504 at once, but a
  thread cannot be stopped: it holds its instance until the model returns. When every instance
  of a version is held that way, the version can answer nothing more.
- No progress: a version whose engine (LLM: tokens and prefills) or instances (requests
  finished) move nothing for ``--stall-timeout`` seconds while work waits (an LLM's sequences;
  a tensor model's requests beyond its instances) is stuck somewhere no timeout sees.

Either way it turns UNAVAILABLE (model ready 503, the server's ready 503, ``properties.reason``
in its metadata and the status page, a warning in the log), and READY again once it moves.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from time import perf_counter_ns
from typing import Any

from rosettaserve.core.registry import ModelVersion, VersionState

log = logging.getLogger("rosettaserve.repository")
WATCH_INTERVAL_S = 0.25
REPEAT_WARNING_S = 30.0  # while a version stays stuck, its warning again this often
PROGRESS = "progress"  # ModelVersion.extra: what check_progress last saw


async def watch(versions: Callable[[], Iterable[ModelVersion]], stall_s: float = 0.0) -> None:
    """Check every served version, every ``WATCH_INTERVAL_S``, until cancelled (``stall_s``:
    the time without progress that makes a version not ready; 0: never)."""
    loop = asyncio.get_running_loop()
    while True:
        await asyncio.sleep(WATCH_INTERVAL_S)
        now = loop.time()
        for mv in versions():
            check(mv, now)
            if stall_s > 0:
                check_progress(mv, time.monotonic(), stall_s)


def check(mv: ModelVersion, now: float) -> None:
    """``now``: event loop time, which call deadlines are in."""
    pool = mv.instances
    if pool is None:
        return
    overdue = pool.overdue(now)
    if overdue and len(overdue) >= pool.count:
        _stuck(mv, pool.count, (perf_counter_ns() - min(c.ran for c in overdue)) / 1e9)
    elif mv.stalled_since and mv.state is VersionState.UNAVAILABLE and not _no_progress(mv):
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


@dataclass
class Progress:
    """What the watch last saw of a version's progress."""

    mark: int = -1  # the counter that moves with progress
    since: float = 0.0  # monotonic time it last moved, or work began waiting
    stalled: bool = False  # this watch made the version not ready


def check_progress(mv: ModelVersion, now: float, stall_s: float) -> None:
    """``now``: monotonic time."""
    if mv.model is None:
        return
    progress = mv.extra.get(PROGRESS)
    if progress is None:
        progress = mv.extra[PROGRESS] = Progress()
    waiting, mark = work_and_mark(mv)
    if mark != progress.mark or waiting <= 0:
        progress.mark, progress.since = mark, now
        if progress.stalled:
            progress.stalled = False
            if mv.state is VersionState.UNAVAILABLE and not mv.stalled_since:
                mv.state, mv.reason = VersionState.READY, ""
                log.info(
                    "model %s version %s is ready again: it made progress", mv.name, mv.version
                )
        return
    idle = now - progress.since
    if idle < stall_s or progress.stalled or mv.state is not VersionState.READY:
        return
    what = "its engine generated nothing" if _engine_stats(mv) is not None else "no call ended"
    reason = (
        f"no progress: {what} for {idle:.0f} s while {waiting} "
        f"{'sequences' if _engine_stats(mv) is not None else 'requests'} waited "
        f"(--stall-timeout {stall_s:g}); it is ready again when it moves"
    )
    progress.stalled = True
    mv.state, mv.reason = VersionState.UNAVAILABLE, reason
    log.warning("model %s version %s is not ready: %s", mv.name, mv.version, reason)


def work_and_mark(mv: ModelVersion) -> tuple[int, int]:
    """The work waiting for the version, and a counter its progress moves: an LLM engine's
    sequences and its tokens and prefills; a tensor model's requests beyond its instances and
    the requests it finished."""
    stats = _engine_stats(mv)
    if stats is not None:
        mark = stats.tokens + stats.prefills + getattr(stats, "prefill_steps", 0)
        return (stats.running + stats.waiting if mv.inflight > 0 else 0), mark
    room = mv.instances.count if mv.instances is not None else 1
    done = mv.stats.success.count + mv.stats.fail.count + mv.stats.execution_count
    return mv.inflight - room, done


def _engine_stats(mv: ModelVersion) -> Any:
    return getattr(getattr(mv.model, "engine", None), "stats", None)


def _no_progress(mv: ModelVersion) -> bool:
    progress = mv.extra.get(PROGRESS)
    return isinstance(progress, Progress) and progress.stalled
