"""The internal representation every protocol converts to and from."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

Parameters = dict[str, Any]


# Built for every request: each defines its __init__ (why: scripts/compile_native.py).


@dataclass(init=False, slots=True)
class Tensor:
    """A named tensor. ``data`` is always an ndarray (BYTES: object array of bytes)."""

    name: str
    datatype: str
    shape: tuple[int, ...]
    data: np.ndarray
    parameters: Parameters

    def __init__(
        self,
        name: str,
        datatype: str,
        shape: tuple[int, ...],
        data: np.ndarray,
        parameters: Parameters | None = None,
    ) -> None:
        self.name = name
        self.datatype = datatype
        self.shape = shape
        self.data = data
        self.parameters = {} if parameters is None else parameters


@dataclass(frozen=True, slots=True)
class TensorSpec:
    """One input or output of a model signature. -1 marks a variable dimension."""

    name: str
    datatype: str
    shape: tuple[int, ...]

    def __reduce__(self) -> tuple[type[TensorSpec], tuple[str, str, tuple[int, ...]]]:
        # rebuilt through __init__: compiled by mypyc, the frozen class's own unpickling
        # assigns fields one by one and is refused (specs cross to isolated model processes)
        return (TensorSpec, (self.name, self.datatype, self.shape))


def shape_matches(spec: tuple[int, ...], shape: tuple[int, ...]) -> bool:
    """Whether ``shape`` is one a spec's shape allows: the same rank, each dimension equal
    where the spec's is not -1."""
    rank = len(spec)
    if rank != len(shape):
        return False
    for i in range(rank):  # (by index: compiled, a loop over zip() is generic and costs ~10x)
        want = spec[i]
        if want != -1 and want != shape[i]:
            return False
    return True


@dataclass(init=False, slots=True)
class RequestedOutput:
    name: str
    parameters: Parameters

    def __init__(self, name: str, parameters: Parameters | None = None) -> None:
        self.name = name
        self.parameters = {} if parameters is None else parameters


@dataclass(init=False, slots=True)
class InferenceRequest:
    model_name: str
    inputs: list[Tensor]
    model_version: str
    id: str | None
    outputs: list[RequestedOutput] | None
    parameters: Parameters
    context: dict[str, Any]

    def __init__(
        self,
        model_name: str,
        inputs: list[Tensor],
        *,
        model_version: str = "",
        id: str | None = None,
        outputs: list[RequestedOutput] | None = None,
        parameters: Parameters | None = None,
        context: dict[str, Any] | None = None,
    ) -> None:
        self.model_name = model_name
        self.inputs = inputs
        self.model_version = model_version
        self.id = id
        self.outputs = outputs
        self.parameters = {} if parameters is None else parameters
        self.context = {} if context is None else context


@dataclass(init=False, slots=True)
class InferenceResponse:
    model_name: str
    model_version: str
    outputs: list[Tensor]
    id: str | None
    parameters: Parameters

    def __init__(
        self,
        model_name: str,
        model_version: str,
        outputs: list[Tensor],
        id: str | None = None,
        parameters: Parameters | None = None,
    ) -> None:
        self.model_name = model_name
        self.model_version = model_version
        self.outputs = outputs
        self.id = id
        self.parameters = {} if parameters is None else parameters
