"""Loading on demand, unloading when idle, a memory budget: the model repository's part that
serves more models than fit in memory at once (residency.py: the measures and choices).

A version whose model can sleep (core/sleep.py: runtime vllm where vLLM's platform has sleep
mode) sleeps when idle instead: ``UNLOADED`` with reason ``idle`` and ``asleep``, its model kept
and its memory still counted against the budget; its next request wakes it. The budget's
eviction, model control's unload and the server's stop release it fully."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING, cast

from rosettaserve.core.errors import ModelNotReady
from rosettaserve.core.registry import KEEP_ALIVE, ON_DEMAND, ModelVersion, VersionState
from rosettaserve.core.sleep import Sleeper, sleeper
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
    _loads: asyncio.Lock

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
        mv.extra[ON_DEMAND] = True  # (the server's readiness does not wait for it)
        try:
            if mv.asleep and await self._rouse(mv):
                return
            mv.state, mv.reason = VersionState.LOADING, ""  # (released while it waited its turn)
            await self._load_one(entry, mv)
        finally:
            del mv.extra[ON_DEMAND]
        log.info("loaded model %s version %s on demand", mv.name, mv.version)

    async def _rouse(self, mv: ModelVersion) -> bool:
        """``mv`` asleep: woken (True). A wake that fails releases it fully (False: it then
        loads afresh), as does an eviction while its request waited for its turn."""
        async with self._loads:  # its memory moves: not while a load measures its own
            if not mv.asleep:
                return False
            mv.asleep = False
            try:
                await cast(Sleeper, mv.model).wake()
            except Exception:
                log.exception("waking model %s version %s failed: it loads afresh", *_named(mv))
                await self._release(mv, time.monotonic() + DRAIN_TIMEOUT_S)
                _forget(mv, VersionState.LOADING, "")
                return False
            mv.state, mv.loaded_ms = VersionState.READY, time.time_ns() // 1_000_000
        log.info("woke model %s version %s", *_named(mv))
        return True

    async def park(self, mv: ModelVersion, reason: str) -> None:
        """Unload ``mv`` but keep serving it: its next request loads it again. Idle, a model
        that can sleep sleeps instead (never under ``_loads``: the budget's evictions, which
        are, release fully)."""
        if residency.sleeping(mv):  # asleep, released to make room
            pass
        elif not residency.idle(mv):
            return
        elif reason == residency.IDLE and sleeper(mv.model) is not None:
            await self._sleep(mv)
            return
        await self._release(mv, time.monotonic() + DRAIN_TIMEOUT_S)
        _forget(mv, VersionState.UNLOADED, reason)
        log.info("unloaded model %s version %s (%s)", mv.name, mv.version, reason)

    async def _sleep(self, mv: ModelVersion) -> None:
        """``mv`` idle: asleep, its model kept. A sleep that fails releases it fully."""
        async with self._loads:  # its memory moves: not while a load measures its own
            model = sleeper(mv.model)
            if model is None or not residency.idle(mv):  # a request came while it waited
                return
            mv.state = VersionState.UNLOADING  # requests that come now wait, then wake it
            try:
                await within(model.sleep(), DRAIN_TIMEOUT_S)
            except Exception:
                log.exception("model %s version %s failed to sleep: unloaded", *_named(mv))
                await self._release(mv, time.monotonic() + DRAIN_TIMEOUT_S)
                _forget(mv, VersionState.UNLOADED, residency.IDLE)
                return
            mv.state, mv.reason, mv.asleep = VersionState.UNLOADED, residency.IDLE, True
        log.info("model %s version %s is asleep (idle)", *_named(mv))

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
    mv.state, mv.reason, mv.resident_bytes, mv.asleep = state, reason, 0, False


def _named(mv: ModelVersion) -> tuple[str, str]:
    return mv.name, mv.version
