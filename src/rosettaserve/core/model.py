"""The model base class users subclass (how the server calls it: ``core.invoker``)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from rosettaserve.core.types import TensorSpec

Arrays = dict[str, np.ndarray]


class Model:
    """Base class of every model: user classes and the built-in runtimes alike.

    ``predict`` takes a dict of named arrays and returns one; it may be sync or
    ``async``, a generator (sync or async) for streaming models, and may accept a
    ``parameters`` keyword to receive the request's parameters.
    """

    platform = "python"

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
