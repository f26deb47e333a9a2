"""Idle versions whose model can sleep (core/sleep.py) sleep instead of unloading, in a real
model repository: the model object is kept, the index shows it ``UNLOADED``, reason ``idle``,
``asleep``; its next request wakes it (not a new load), concurrent ones wake it once; the
budget's eviction, model control's unload and the server's stop release it fully; a sleep or a
wake that fails releases it, and it loads afresh. Ollama's keep_alive takes the same path."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from rosettaserve import Model
from rosettaserve.core.dataplane import DataPlane
from rosettaserve.core.registry import KEEP_ALIVE, ModelVersion, VersionState
from rosettaserve.core.types import TensorSpec
from rosettaserve.protocols.oip.rest import repository_routes
from rosettaserve.repository import residency
from rosettaserve.repository.config import ModelConfig
from rosettaserve.repository.manager import ModelRepository
from rosettaserve.repository.residency import Demand
from rosettaserve.web.routing import HttpRequest
from tests.unit.test_dataplane import request

MIB = 1 << 20
YAML = """runtime: python
inputs: [{name: X, datatype: INT32, shape: [-1]}]
outputs: [{name: Y, datatype: INT32, shape: [-1]}]
"""


class Sleepy(Model):
    """Counts its loads, unloads, sleeps and wakes; ``gate`` holds its wake until set."""

    can_sleep = True

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.loads = self.unloads = self.sleeps = self.wakes = 0
        self.fail_sleep = self.fail_wake = False
        self.gate: asyncio.Event | None = None

    def load(self) -> None:
        self.loads += 1
        self.inputs = [TensorSpec("X", "INT32", (-1,))]
        self.outputs = [TensorSpec("Y", "INT32", (-1,))]

    def unload(self) -> None:
        self.unloads += 1

    def predict(self, inputs: dict[str, np.ndarray]) -> Any:
        return {"Y": inputs["X"] * 2}

    async def sleep(self) -> None:
        self.sleeps += 1
        if self.fail_sleep:
            raise RuntimeError("the device refused")

    async def wake(self) -> None:
        self.wakes += 1
        if self.gate is not None:
            await self.gate.wait()
        if self.fail_wake:
            raise RuntimeError("the device refused")


class Awake(Sleepy):
    can_sleep = False  # (runtime vllm where vLLM's platform has no sleep mode)


class Served:
    """A repository of the model ``m`` (and ``others``), its models as they are made, and a data
    plane that wakes versions as the server's does."""

    def __init__(self, root: Path, kind: type[Sleepy] = Sleepy, budget: int = 0) -> None:
        self.made: list[Sleepy] = []
        self.repo = ModelRepository(root, self.create, demand=Demand(budget=budget))
        self.dp = DataPlane(self.repo, control=self.repo, waker=self.repo.wake)
        self.dp.started = True
        self.kind = kind

    def create(self, name: str, version: str, path: Path, config: ModelConfig) -> Model:
        model = self.kind(name, version, path, config.raw)
        self.made.append(model)
        return model

    def version(self, name: str = "m") -> ModelVersion:
        versions = self.repo.versions(name)
        assert versions is not None
        return versions[0]

    async def row(self, name: str = "m") -> dict[str, Any]:
        """``name``'s row of the repository index, as Triton's REST index answers it."""
        (index, *_) = repository_routes(self.dp)
        answer = await index.handler(HttpRequest("POST", index.pattern, b"", {}, b"{}"))
        return next(dict(r) for r in json.loads(answer.body) if r["name"] == name)

    async def answer(self) -> list[int]:
        response = await self.dp.infer(request([1, 2]))
        return [int(v) for v in response.outputs[0].data]


def repository(tmp_path: Path, extra: str = "unload_after_idle: 0\n", **models: str) -> Path:
    for name, more in {"m": extra, **models}.items():
        (tmp_path / name / "1").mkdir(parents=True)
        (tmp_path / name / "model.yaml").write_text(YAML + more)
    return tmp_path


async def idle_until(served: Served, done: Callable[[], bool]) -> None:
    """The repository's idle timer runs until ``done``."""
    timer = asyncio.ensure_future(served.repo.unload_idle_forever(interval=0.01))
    try:
        while not done():
            await asyncio.sleep(0.01)
    finally:
        timer.cancel()


async def asleep(served: Served) -> ModelVersion:
    await served.repo.load_all()
    mv = served.version()
    await idle_until(served, lambda: mv.asleep)
    return mv


def test_an_idle_version_sleeps_its_model_kept_and_the_index_says_so(tmp_path: Path) -> None:
    served = Served(repository(tmp_path))

    async def scenario() -> None:
        await served.repo.load_all()
        mv = served.version()
        model, held = mv.model, mv.resident_bytes
        await idle_until(served, lambda: mv.asleep)
        assert mv.model is model
        assert served.made == [model]
        assert (model.sleeps, model.unloads) == (1, 0)
        row = await served.row()
        assert (row["state"], row["reason"], row["asleep"]) == ("UNLOADED", "idle", True)
        assert row["resident_bytes"] == held  # it holds its memory still
        await served.repo.unload_all()

    asyncio.run(scenario())


def test_its_next_request_wakes_it_rather_than_loading_it(tmp_path: Path) -> None:
    served = Served(repository(tmp_path))

    async def scenario() -> None:
        mv = await asleep(served)
        assert await served.answer() == [2, 4]
        (model,) = served.made
        assert (model.loads, model.wakes, model.unloads) == (1, 1, 0)
        assert mv.ready
        assert mv.model is model
        assert "asleep" not in await served.row()  # (the key is there only when asleep)
        await served.repo.unload_all()

    asyncio.run(scenario())


def test_requests_that_come_together_wake_it_once(tmp_path: Path) -> None:
    served = Served(repository(tmp_path))

    async def scenario() -> None:
        await asleep(served)
        (model,) = served.made
        model.gate = asyncio.Event()
        answers = [asyncio.ensure_future(served.answer()) for _ in range(4)]
        while not model.wakes:
            await asyncio.sleep(0.01)
        assert served.version().state is VersionState.LOADING
        assert served.dp.ready()  # the server's readiness does not wait for it, as for a load
        model.gate.set()
        assert await asyncio.gather(*answers) == [[2, 4]] * 4
        assert (model.loads, model.wakes) == (1, 1)
        await served.repo.unload_all()

    asyncio.run(scenario())


def test_the_budget_releases_a_sleeping_version_fully(tmp_path: Path) -> None:
    served = Served(repository(tmp_path, other="load: lazy\n"), budget=100 * MIB)

    async def scenario() -> None:
        mv = await asleep(served)
        mv.resident_bytes = 60 * MIB  # what it held (a tiny test model's growth is noise)
        served.repo._sizes[("other", "1")] = 60 * MIB  # what the other held at its last load
        await served.repo.wake(served.version("other"))  # asleep, it still counts: evicted
        first = served.made[0]
        assert (first.unloads, mv.model, mv.asleep) == (1, None, False)
        row = await served.row()
        assert (row["state"], row["reason"], row["resident_bytes"]) == ("UNLOADED", "evicted", 0)
        assert await served.answer() == [2, 4]  # loaded afresh
        assert served.made[-1] is not first
        assert served.made[-1].loads == 1
        await served.repo.unload_all()

    asyncio.run(scenario())


def test_a_sleeping_version_counts_against_the_budget_and_may_make_room() -> None:
    sleeping = ModelVersion("s", "1", "vllm", state=VersionState.UNLOADED)
    sleeping.asleep, sleeping.resident_bytes, sleeping.loaded_ms = True, 60 * MIB, 100
    busy = ModelVersion("b", "1", "vllm", state=VersionState.READY, inflight=1)
    busy.resident_bytes = 30 * MIB
    loading = ModelVersion("n", "1", "vllm")
    served = [sleeping, busy, loading]
    assert residency.to_evict(served, loading, 10 * MIB, 100 * MIB) == []  # 90 + 10 fit
    assert residency.to_evict(served, loading, 20 * MIB, 100 * MIB) == [sleeping]
    sleeping.state = VersionState.LOADING  # a request is waking it: it is not taken
    assert residency.to_evict(served, loading, 20 * MIB, 100 * MIB) == []


@pytest.mark.parametrize("how", ["model control", "server stop"])
def test_unloading_releases_a_sleeping_version_fully(tmp_path: Path, how: str) -> None:
    served = Served(repository(tmp_path))

    async def scenario() -> None:
        mv = await asleep(served)
        if how == "model control":
            await served.repo.unload_model("m")
            assert (await served.row())["reason"] == "unloaded"
        else:
            await served.repo.unload_all()
        (model,) = served.made
        assert (model.unloads, mv.asleep) == (1, False)

    asyncio.run(scenario())


def test_a_wake_that_fails_releases_it_and_the_request_loads_it_afresh(tmp_path: Path) -> None:
    served = Served(repository(tmp_path))

    async def scenario() -> None:
        await asleep(served)
        first = served.made[0]
        first.fail_wake = True
        assert await served.answer() == [2, 4]
        assert (first.wakes, first.unloads) == (1, 1)
        fresh = served.made[-1]
        assert fresh is not first
        assert fresh.loads == 1
        assert served.version().model is fresh
        await served.repo.unload_all()

    asyncio.run(scenario())


def test_a_sleep_that_fails_unloads_it(tmp_path: Path) -> None:
    served = Served(repository(tmp_path))

    async def scenario() -> None:
        await served.repo.load_all()
        mv = served.version()
        first = mv.model
        assert isinstance(first, Sleepy)
        first.fail_sleep = True
        await idle_until(served, lambda: mv.state is VersionState.UNLOADED)
        assert (first.sleeps, first.unloads, mv.model, mv.asleep) == (1, 1, None, False)
        assert (await served.row())["reason"] == "idle"
        assert await served.answer() == [2, 4]
        assert served.made[-1] is not first
        await served.repo.unload_all()

    asyncio.run(scenario())


def test_ollama_keep_alive_puts_it_to_sleep_too(tmp_path: Path) -> None:
    served = Served(repository(tmp_path, extra=""))  # no unload_after_idle

    async def scenario() -> None:
        await served.repo.load_all()
        mv = served.version()
        mv.extra[KEEP_ALIVE] = 0.0  # as an Ollama request's keep_alive: 0 sets it
        await idle_until(served, lambda: mv.asleep)
        assert served.made[0].sleeps == 1
        await served.repo.unload_all()

    asyncio.run(scenario())


def test_a_model_that_cannot_sleep_now_unloads_as_before(tmp_path: Path) -> None:
    served = Served(repository(tmp_path), kind=Awake)

    async def scenario() -> None:
        await served.repo.load_all()
        mv = served.version()
        await idle_until(served, lambda: mv.state is VersionState.UNLOADED)
        (model,) = served.made
        assert (model.sleeps, model.unloads, mv.model, mv.asleep) == (0, 1, None, False)
        assert "asleep" not in await served.row()
        await served.repo.unload_all()

    asyncio.run(scenario())
