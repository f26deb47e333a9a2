"""Loading on demand, unloading when idle, a memory budget: the model repository's part that
serves more models than fit in memory at once (residency.py: the measures and choices)."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING

from rosettaserve.core.errors import ModelNotReady
from rosettaserve.core.registry import KEEP_ALIVE, ON_DEMAND, ModelVersion, VersionState
from rosettaserve.core.timeouts import within
from rosettaserve.repository import residency
from rosettaserve.repository.residency import Demand

if TYPE_CHECKING:
    from rosettaserve.repository.manager import ModelEntry

log = logging.getLogger("rosettaserve.repository")
DRAIN_TIMEOUT_S = 60.0  # how long an unload waits for requests in flight
_WAKEABLE = (VersionState.UNLOADED, VersionState.UNLOADING)


class OnDemand:
    """ModelRepository's loading on demand (a mixin: it loads and releases through the
    repository's one way of each, ``_load_one`` and ``_release``)."""

    _entries: dict[str, ModelEntry]
    demand: Demand
    _waking: dict[ModelVersion, asyncio.Future[None]]
    _sizes: dict[tuple[str, str], int]

    async def _load_one(self, entry: ModelEntry, mv: ModelVersion) -> None:
        raise NotImplementedError

    async def _release(self, mv: ModelVersion, deadline: float) -> None:
        raise NotImplementedError

    async def _hold(self, mv: ModelVersion, size: int) -> None:
        """``mv`` loaded holding ``size`` bytes: others make room for it, or it cannot fit."""
        if not mv.ready:
            return
        mv.resident_bytes = self._sizes[(mv.name, mv.version)] = size
        mv.loaded_ms = time.time_ns() // 1_000_000
        why = residency.too_big(size, self.demand.budget)
        if why:
            await self._release(mv, time.monotonic() + DRAIN_TIMEOUT_S)
            _forget(mv, VersionState.UNAVAILABLE, why)
            log.error("model %s version %s failed to load: %s", mv.name, mv.version, why)
            return
        await self._make_room(mv, size)

    async def _make_room(self, mv: ModelVersion, needed: int) -> None:
        """Within the budget: the least recently used idle versions unloaded (never one with a
        request in flight)."""
        if self.demand.budget:
            served = [v for e in self._entries.values() for v in e.versions]
            for other in residency.to_evict(served, mv, needed, self.demand.budget):
                await self.park(other, residency.EVICTED)

    # -- loading on demand ---------------------------------------------------------------------

    async def wake(self, mv: ModelVersion) -> None:
        """``mv`` loaded if it is served but unloaded (its request waits, up to
        --load-timeout); concurrent requests wait for the same load."""
        pending = self._waking.get(mv)
        if pending is None:
            entry = self._entries.get(mv.name)
            if mv.state not in _WAKEABLE or entry is None or mv not in entry.versions:
                return
            pending = asyncio.ensure_future(self._wake(entry, mv))
            self._waking[mv] = pending
            pending.add_done_callback(lambda _: self._waking.pop(mv, None))
        timeout = self.demand.load_timeout_s
        try:
            await within(asyncio.shield(pending), timeout)
        except TimeoutError:
            raise ModelNotReady(
                f"model '{mv.name}' version {mv.version} is still loading after {timeout:g} s "
                "(--load-timeout); retry later"
            ) from None

    async def _wake(self, entry: ModelEntry, mv: ModelVersion) -> None:
        while mv.state is VersionState.UNLOADING:  # unloading when idle: then loaded again
            await asyncio.sleep(0.01)
        mv.state, mv.reason = VersionState.LOADING, ""
        mv.extra[ON_DEMAND] = True
        try:
            await self._load_one(entry, mv)
        finally:
            del mv.extra[ON_DEMAND]
        log.info("loaded model %s version %s on demand", mv.name, mv.version)

    async def park(self, mv: ModelVersion, reason: str) -> None:
        """Unload ``mv`` but keep serving it: its next request loads it again."""
        if not residency.idle(mv):
            return
        await self._release(mv, time.monotonic() + DRAIN_TIMEOUT_S)
        _forget(mv, VersionState.UNLOADED, reason)
        log.info("unloaded model %s version %s (%s)", mv.name, mv.version, reason)

    async def unload_idle_forever(self, interval: float = 0.25) -> None:
        """Versions unused for their model.yaml's unload_after_idle seconds (or their last
        request's keep_alive): unloaded."""
        while True:
            await asyncio.sleep(interval)
            for entry in list(self._entries.values()):
                default = entry.config.unload_after_idle if entry.config else None
                for mv in list(entry.versions):
                    limit = mv.extra.get(KEEP_ALIVE, default)  # a request's keep_alive wins
                    if limit is None or limit < 0 or not residency.idle(mv):
                        continue
                    if residency.idle_for_s(mv) >= limit:
                        await self.park(mv, residency.IDLE)


def _forget(mv: ModelVersion, state: VersionState, reason: str) -> None:
    """A released version holds nothing: its next load starts afresh."""
    mv.model = mv.invoker = mv.instances = mv.answers = None
    mv.state, mv.reason, mv.resident_bytes = state, reason, 0
