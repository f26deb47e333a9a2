"""Where a synchronous predict runs: the event loop thread once its calls are known to be fast,
the model thread pool otherwise."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import numpy as np
import pytest

from rosettaserve.core import invoker as invoker_module
from rosettaserve.core.call import Call
from rosettaserve.core.invoker import Invoker
from rosettaserve.core.model import Model


class Recorder(Model):
    def __init__(self, pause_s: float = 0.0) -> None:
        super().__init__("recorder")
        self.pause_s = pause_s
        self.threads: list[int] = []

    def predict(self, inputs: dict[str, np.ndarray]) -> dict[str, Any]:
        self.threads.append(threading.get_ident())
        if self.pause_s:
            time.sleep(self.pause_s)
        return {"y": inputs["x"]}


async def calls(invoker: Invoker, n: int) -> None:
    for _ in range(n):
        await invoker.predict({"x": np.zeros(1)}, {}, Call(time.perf_counter_ns()))


def loop_thread_after(invoker: Invoker, n: int) -> int:
    """Make ``n`` calls on a fresh event loop; the loop's thread."""

    async def main() -> int:
        await calls(invoker, n)
        return threading.get_ident()

    return asyncio.run(main())


def test_a_fast_model_moves_to_the_event_loop_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(invoker_module, "INLINE_NS", 50_000_000)  # 50 ms: a busy machine passes
    model = Recorder()
    invoker = Invoker(model)

    loop_thread = loop_thread_after(invoker, 40)
    assert model.threads[0] != loop_thread  # unknown at first: the pool
    assert model.threads[-1] == loop_thread
    assert invoker.inline


def test_a_slow_model_stays_on_the_pool(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(invoker_module, "INLINE_NS", 1_000_000)  # 1 ms
    model = Recorder(pause_s=0.003)
    invoker = Invoker(model)

    loop_thread = loop_thread_after(invoker, 10)
    assert loop_thread not in model.threads
    assert not invoker.inline


def test_one_slow_call_sends_the_next_ones_back_to_the_pool(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(invoker_module, "INLINE_NS", 50_000_000)
    model = Recorder()
    invoker = Invoker(model)

    async def main() -> int:
        await calls(invoker, 40)
        assert invoker.inline
        model.pause_s = 0.5  # 10x the threshold: the mean jumps over it at once
        await calls(invoker, 1)
        model.pause_s = 0.0
        model.threads.clear()
        await calls(invoker, 1)
        return threading.get_ident()

    loop_thread = asyncio.run(main())
    assert model.threads == [t for t in model.threads if t != loop_thread]
    assert model.threads  # the call after the slow one ran on the pool


def test_zero_threshold_keeps_every_call_on_the_pool(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(invoker_module, "INLINE_NS", 0)
    model = Recorder()
    invoker = Invoker(model)

    loop_thread = loop_thread_after(invoker, 40)
    assert loop_thread not in model.threads
