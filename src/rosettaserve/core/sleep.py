"""A model that can sleep: an idle version keeps its model object but hands back what it can
(runtime vllm: vLLM's sleep mode level 1, its weights offloaded to host memory and its KV cache
dropped), and its next request wakes it, which is much faster than loading it again.

The repository (repository/on_demand.py) sleeps a version where it would unload it for being
idle, if its model says it ``can_sleep`` now. ``sleep`` and ``wake`` are awaited on the server's
event loop, the one its requests run on (vLLM's engine answers only on the loop its requests
use): a model whose sleep blocks hands that work to a thread itself. A sleep or wake that
raises releases the version fully; its next request loads it afresh.
"""

from __future__ import annotations

from typing import Protocol, cast


class Sleeper(Protocol):
    """What a model that can sleep adds to ``core.model.Model``."""

    @property
    def can_sleep(self) -> bool:
        """It can sleep now (False: it unloads when idle, as other models do)."""
        ...

    async def sleep(self) -> None:
        """Hand back what it can while idle, keeping what ``wake`` needs."""
        ...

    async def wake(self) -> None:
        """Serve again after ``sleep``."""
        ...


def sleeper(model: object) -> Sleeper | None:
    """``model`` if it can sleep now, else None (any model without the three members)."""
    able = getattr(model, "can_sleep", False) is True
    if able and callable(getattr(model, "sleep", None)) and callable(getattr(model, "wake", None)):
        return cast(Sleeper, model)
    return None
