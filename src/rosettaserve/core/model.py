"""The model base class users subclass (how the server calls it: ``core.invoker``)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from rosettaserve.core.model_calls import ModelCalls
from rosettaserve.core.types import TensorSpec

Arrays = dict[str, np.ndarray]


class Model:
    """Base class of every model: user classes and the built-in runtimes alike.

    ``predict`` takes a dict of named arrays and returns one; it may be sync or
    ``async``, a generator (sync or async) for streaming models, and may accept a
    ``parameters`` keyword to receive the request's parameters.
    """

    platform = "python"
    calls: ModelCalls | None = None  # set as its version loads: how it calls other models
    calls_models = False  # it called one (its predict then never runs on the event loop)

    def __init__(
        self,
        name: str = "",
        version: str = "1",
        path: str | Path = ".",
        config: Mapping[str, Any] | None = None,
    ) -> None:
        self.name = name
        self.version = version
        self.path = Path(path)
        self.config: dict[str, Any] = dict(config or {})
        self.inputs: list[TensorSpec] = []
        self.outputs: list[TensorSpec] = []
        self.max_batch_size = 0

    def load(self) -> None:
        """Load weights; ``self.path`` is the version folder."""

    def unload(self) -> None:
        """Release what ``load`` took."""

    def predict(self, inputs: Arrays) -> Any:
        raise NotImplementedError(f"{type(self).__name__} does not implement predict()")

    def infer(
        self,
        model: str,
        inputs: Mapping[str, np.ndarray],
        version: str | None = None,
        *,
        outputs: list[str] | None = None,
        timeout_us: int | None = None,
        parameters: dict[str, Any] | None = None,
    ) -> Arrays:
        """Another served model's outputs for ``inputs`` (Triton's BLS), from a synchronous
        ``predict``; the callee's error raises here with its message."""
        calls = self._model_calls()
        result: Arrays = calls.infer_blocking(
            model,
            inputs,
            version=version,
            outputs=outputs,
            timeout_us=timeout_us,
            parameters=parameters,
        )
        return result

    async def infer_async(
        self,
        model: str,
        inputs: Mapping[str, np.ndarray],
        version: str | None = None,
        *,
        outputs: list[str] | None = None,
        timeout_us: int | None = None,
        parameters: dict[str, Any] | None = None,
    ) -> Arrays:
        """``infer`` from an ``async def predict``."""
        calls = self._model_calls()
        return await calls.infer(
            model, inputs, version, outputs=outputs, timeout_us=timeout_us, parameters=parameters
        )

    def _model_calls(self) -> ModelCalls:
        if self.calls is None:
            raise RuntimeError(
                "this model cannot call other models: only a version the server loaded can "
                "(not one under isolation: process)"
            )
        self.calls_models = True
        return self.calls
