"""Runtime vllm's sleep (runtimes/vllm/sleep.py), with stand-ins for vLLM (vLLM itself is
tested in tests_vllm): the engine is built with ``enable_sleep_mode`` only where vLLM's own
platform check says it has sleep mode (and model.yaml's engine_args did not say otherwise), the
model then says it can sleep, and its sleep and wake are ``AsyncLLM``'s level-1 ``sleep`` and
``wake_up``."""

from __future__ import annotations

import asyncio
import sys
import types
from pathlib import Path
from typing import Any

import pytest

from rosettaserve.core.generate import Fields
from rosettaserve.core.sleep import sleeper
from rosettaserve.runtimes.vllm.args import engine_kwargs
from rosettaserve.runtimes.vllm.model import VllmModel
from rosettaserve.runtimes.vllm.pooling import VllmPoolingModel


class Built(Exception):
    """Raised by the stand-in ``AsyncLLM.from_engine_args``: the test has what it needs."""


class FakeLlm:
    """What the sleep calls of vLLM's ``AsyncLLM``."""

    def __init__(self, wakes_fully: bool = True) -> None:
        self.calls: list[tuple[str, Any]] = []
        self.wakes_fully = wakes_fully

    async def sleep(self, level: int = 1, mode: str = "abort") -> None:
        self.calls.append(("sleep", level))

    async def wake_up(self, tags: list[str] | None = None) -> bool:
        self.calls.append(("wake_up", tags))
        return self.wakes_fully


@pytest.fixture
def fake_vllm(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """vLLM's modules as the load imports them; ``seen["available"]`` is its platform's answer,
    ``seen["kwargs"]`` the engine arguments the load built."""
    seen: dict[str, Any] = {"available": False}
    for env in ("HF_HUB_OFFLINE", "VLLM_NO_USAGE_STATS", "VLLM_CONFIGURE_LOGGING"):
        monkeypatch.setenv(env, "1")

    def args(**kwargs: Any) -> dict[str, Any]:
        seen["kwargs"] = kwargs
        return kwargs

    def from_engine_args(args: Any) -> Any:
        raise Built

    platform = types.SimpleNamespace(is_sleep_mode_available=lambda: seen["available"])
    modules = {
        "vllm": types.ModuleType("vllm"),
        "vllm.platforms": types.SimpleNamespace(current_platform=platform),
        "vllm.engine": types.ModuleType("vllm.engine"),
        "vllm.engine.arg_utils": types.SimpleNamespace(AsyncEngineArgs=args),
        "vllm.v1": types.ModuleType("vllm.v1"),
        "vllm.v1.engine": types.ModuleType("vllm.v1.engine"),
        "vllm.v1.engine.async_llm": types.SimpleNamespace(
            AsyncLLM=types.SimpleNamespace(from_engine_args=from_engine_args)
        ),
    }
    for name, module in modules.items():
        monkeypatch.setitem(sys.modules, name, module)
    return seen


def load(kind: type[VllmModel | VllmPoolingModel], folder: Path, **params: Any) -> Any:
    (folder / "config.json").write_text("{}")
    model = kind("m", "1", folder, {"parameters": params})
    with pytest.raises(Built):
        model.load()
    return model


@pytest.mark.parametrize("kind", [VllmModel, VllmPoolingModel])
@pytest.mark.parametrize("available", [True, False])
def test_the_engine_sleeps_only_where_vllms_platform_has_sleep_mode(
    fake_vllm: dict[str, Any], tmp_path: Path, kind: type[Any], available: bool
) -> None:
    fake_vllm["available"] = available
    params = {"task": "embed"} if kind is VllmPoolingModel else {}
    model = load(kind, tmp_path, **params)
    assert fake_vllm["kwargs"].get("enable_sleep_mode", False) is available
    assert model.can_sleep is available
    assert (sleeper(model) is model) is available


def test_engine_args_that_say_otherwise_win(fake_vllm: dict[str, Any], tmp_path: Path) -> None:
    fake_vllm["available"] = True
    model = load(VllmModel, tmp_path, engine_args={"enable_sleep_mode": False})
    assert fake_vllm["kwargs"]["enable_sleep_mode"] is False
    assert sleeper(model) is None  # it unloads when idle


def test_engine_kwargs_ask_for_sleep_mode_only_when_told() -> None:
    params = Fields({}, "parameters")
    assert "enable_sleep_mode" not in engine_kwargs("m", params, Path("m"))
    assert engine_kwargs("m", params, Path("m"), sleep_mode=True)["enable_sleep_mode"] is True


def test_sleep_is_vllms_level_1_and_wake_its_wake_up() -> None:
    llm = FakeLlm()
    model = VllmModel("m", "1", ".", {})
    model.engine = types.SimpleNamespace(llm=llm)  # type: ignore[assignment]
    pooling = VllmPoolingModel("e", "1", ".", {})
    pooling.llm = llm
    for sleeping in (model, pooling):
        asyncio.run(sleeping.sleep())
        asyncio.run(sleeping.wake())
    assert llm.calls == [("sleep", 1), ("wake_up", None)] * 2


def test_a_wake_that_leaves_it_asleep_raises() -> None:
    model = VllmPoolingModel("e", "1", ".", {})
    model.llm = FakeLlm(wakes_fully=False)
    with pytest.raises(RuntimeError, match="did not wake fully"):
        asyncio.run(model.wake())
