"""The internal representation every protocol converts to and from."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

Parameters = dict[str, Any]


@dataclass(slots=True)
class Tensor:
    """A named tensor. ``data`` is always an ndarray (BYTES: object array of bytes)."""

    name: str
    datatype: str
    shape: tuple[int, ...]
    data: np.ndarray
    parameters: Parameters = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class TensorSpec:
    """One input or output of a model signature. -1 marks a variable dimension."""

    name: str
    datatype: str
    shape: tuple[int, ...]


@dataclass(slots=True)
class RequestedOutput:
    name: str
    parameters: Parameters = field(default_factory=dict)


@dataclass(slots=True)
class InferenceRequest:
    model_name: str
    inputs: list[Tensor]
    model_version: str = ""
    id: str | None = None
    outputs: list[RequestedOutput] | None = None
    parameters: Parameters = field(default_factory=dict)
    context: dict[str, Any] = field(default_factory=dict)


@dataclass(slots=True)
class InferenceResponse:
    model_name: str
    model_version: str
    outputs: list[Tensor]
    id: str | None = None
    parameters: Parameters = field(default_factory=dict)
