"""Many models, one memory: versions that load on their first request, unload when idle, and
share a memory budget (the least recently used idle versions make room for a load).

The memory a version holds is measured, not guessed: the process's resident memory grew by
that much while it loaded (loads take turns, so one load's growth is its own), or under
``isolation: process`` its workers' whole resident memory."""

from __future__ import annotations

import os
import re
import time
from collections.abc import Iterable
from dataclasses import dataclass

from rosettaserve.core.registry import ModelVersion, VersionState
from rosettaserve.observability.metrics import llm_gauges
from rosettaserve.scheduling.isolation import ProcessModel

LAZY, IDLE, EVICTED = "lazy", "idle", "evicted"  # why a served version is UNLOADED
_UNITS = {"": 1, "B": 1, "K": 1000, "M": 1000**2, "G": 1000**3, "T": 1000**4}
_SIZE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([KMGT]?)(I?)B?\s*", re.IGNORECASE)


@dataclass(frozen=True)
class Demand:
    """The server's settings of loading on demand (model.yaml's ``load`` wins over ``mode``)."""

    mode: str = "eager"  # eager | lazy: --load
    budget: int = 0  # --memory-budget in bytes (0: none)
    load_timeout_s: float = 300.0  # a request waits this long for its version's load


def parse_size(text: str) -> int:
    """``12GiB``, ``512MiB``, ``2G`` (powers of 1000), ``1048576``: bytes."""
    found = _SIZE.fullmatch(text)
    if found is None:
        raise ValueError(f"expected a size such as 512MiB, 12GiB or 2G, got {text!r}")
    number, unit, binary = found.groups()
    scale = _UNITS[unit.upper()]
    if binary and unit:
        scale = 1024 ** ("KMGT".index(unit.upper()) + 1)
    return int(float(number) * scale)


def show_size(n: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} bytes"


def rss_bytes(pid: int | str = "self") -> int:
    """A process's resident memory now (0 where /proc cannot tell)."""
    try:
        with open(f"/proc/{pid}/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def resident(mv: ModelVersion, before: int) -> int:
    """What ``mv`` holds now that it loaded (``before``: the process's memory before)."""
    model = mv.model
    if isinstance(model, ProcessModel):
        return sum(rss_bytes(w.proc.pid) for w in model.pool.workers if w.proc.pid)
    return max(0, rss_bytes() - before)


def last_used_ms(mv: ModelVersion) -> int:
    """Wall time (ms) it was last loaded or asked something."""
    return max(mv.loaded_ms, mv.stats.last_inference_ms)


def idle(mv: ModelVersion) -> bool:
    """Loaded, and nothing in flight or queued on it (an LLM engine: no sequence running or
    waiting, which its requests' count does not hold while they generate): it may be unloaded."""
    waiting = mv.invoker.waiting if mv.invoker is not None else None
    if mv.state is not VersionState.READY or mv.inflight or waiting:
        return False
    engine = llm_gauges(mv)
    return engine is None or not (engine.running or engine.waiting)


def sleeping(mv: ModelVersion) -> bool:
    """Unloaded for being idle with its model kept asleep, and no request waking it: it still
    holds memory, and may be released to make room."""
    return mv.asleep and mv.state is VersionState.UNLOADED


def idle_for_s(mv: ModelVersion) -> float:
    return (time.time_ns() // 1_000_000 - last_used_ms(mv)) / 1000


def to_evict(
    versions: Iterable[ModelVersion], loading: ModelVersion, needed: int, budget: int
) -> list[ModelVersion]:
    """The least recently used idle versions to unload so that ``needed`` more bytes fit in
    ``budget`` (as many as there are, if even all of them do not make enough room). A version
    asleep holds memory too: it counts, and is released like an idle one."""
    held = [v for v in versions if v is not loading and (v.state is VersionState.READY or v.asleep)]
    over = sum(v.resident_bytes for v in held) + needed - budget
    chosen: list[ModelVersion] = []
    for mv in sorted((v for v in held if idle(v) or sleeping(v)), key=last_used_ms):
        if over <= 0:
            break
        chosen.append(mv)
        over -= mv.resident_bytes
    return chosen


def too_big(needed: int, budget: int) -> str:
    """Why a version that holds ``needed`` bytes can never load ("" if it fits)."""
    if not budget or needed <= budget:
        return ""
    return (
        f"it needs {show_size(needed)}, more than the whole memory budget of "
        f"{show_size(budget)} (--memory-budget): it can never fit"
    )
