"""gc_tuning: no collections from pause() until settle(), which freezes what startup built
without a collection (that would delay the first ready answer) and turns collection back on;
ROSETTASERVE_GC_TUNING=0 leaves the collector alone."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Coroutine, Iterator
from pathlib import Path
from typing import Any

import pytest
import uvloop

from rosettaserve.cli import main as cli
from rosettaserve.server import gc_tuning, workers
from rosettaserve.server.settings import Settings


@pytest.fixture(autouse=True)
def restore_gc() -> Iterator[None]:
    yield
    gc.unfreeze()
    gc.enable()


class Cycle:
    def __init__(self) -> None:
        self.me = self


def test_pause_then_settle(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ROSETTASERVE_GC_TUNING", raising=False)
    collections: list[str] = []

    def seen(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            collections.append(phase)

    gc.callbacks.append(seen)
    try:
        assert gc_tuning.pause() is True
        assert not gc.isenabled()
        survivor = Cycle()
        startup_garbage = weakref.ref(Cycle())  # a cycle: only a collection can free it
        allocations = [[] for _ in range(10 * gc.get_threshold()[0])]  # would trigger some
        del allocations
        gc_tuning.settle()
        assert collections == []  # none while paused, and settle ran none either
    finally:
        gc.callbacks.remove(seen)
    assert gc.isenabled()
    assert gc.get_freeze_count() > 0
    assert all(o is not survivor for o in gc.get_objects())  # frozen: out of every collection
    gc.collect()
    assert startup_garbage() is not None  # frozen with the rest: kept, never scanned again
    later_garbage = weakref.ref(Cycle())
    gc.collect()
    assert later_garbage() is None  # what is built after startup is collected as usual


def test_turned_off_by_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ROSETTASERVE_GC_TUNING", "0")
    assert gc_tuning.pause() is False
    assert gc.isenabled()
    gc_tuning.settle()
    assert gc.get_freeze_count() == 0


def test_serve_pauses_but_the_workers_supervisor_does_not(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """One process pauses until its models load; with --workers the supervisor, which loads no
    model and would never settle, keeps collecting (each worker pauses and settles its own)."""
    monkeypatch.delenv("ROSETTASERVE_GC_TUNING", raising=False)
    monkeypatch.setenv("ROSETTASERVE_MALLOC_TUNING", "0")
    seen: dict[str, bool] = {}

    def supervise(settings: Settings) -> int:
        seen["supervisor"] = gc.isenabled()
        return 0

    def run_server(main: Coroutine[Any, Any, None]) -> None:
        main.close()
        seen["server"] = gc.isenabled()

    monkeypatch.setattr(workers, "supervise", supervise)
    monkeypatch.setattr(uvloop, "run", run_server)
    assert cli.run(Settings(repository=tmp_path, workers=2)) == 0
    assert cli.run(Settings(repository=tmp_path)) == 0
    assert seen == {"supervisor": True, "server": False}
