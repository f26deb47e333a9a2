"""Triton's raw binary request: ``Inference-Header-Content-Length: 0`` and a body that is the one
input's bytes, with no JSON header. The model's signature says the rest, as Triton deduces it:
the model has exactly one input; the request is one row (batch 1 where the model batches); a
fixed-size input may have one variable dimension, which the byte count sets; a BYTES input must
hold one element, the whole body (no length prefix). Every output comes back as binary data."""

from __future__ import annotations

import math

import numpy as np

from rosettaserve.core import dtypes
from rosettaserve.core.codec import from_raw
from rosettaserve.core.errors import InvalidInput
from rosettaserve.core.registry import ModelVersion
from rosettaserve.core.types import InferenceRequest, Tensor
from rosettaserve.protocols.oip.convert import BINARY_OUTPUT_KEY, request_context


def is_raw(header: str | None) -> bool:
    return header is not None and header.strip() == "0"


def raw_request(body: bytes | bytearray, mv: ModelVersion) -> InferenceRequest:
    """The request a raw body means for ``mv`` (400 where its signature cannot say it)."""
    if len(mv.inputs) != 1:
        raise InvalidInput(
            f"a raw binary request (Inference-Header-Content-Length: 0) is for a model with "
            f"exactly 1 input; model '{mv.name}' has {len(mv.inputs)}"
        )
    spec = mv.inputs[0]
    dtype = dtypes.lookup(spec.datatype, spec.name)
    dims = list(spec.shape)
    batched = mv.max_batch_size > 0 and bool(dims)
    if batched:
        dims[0] = 1  # one row
    inner = dims[1:] if batched else dims
    if dtype.is_bytes:
        if inner != [1]:
            raise InvalidInput(
                f"for the BYTES raw input '{spec.name}' the model's input shape must be [1] "
                f"(without the batch dimension), not {inner}"
            )
        data = np.array([bytes(body)], dtype=object).reshape(dims)
    else:
        _deduce(dims, len(body), dtype.itemsize, spec.name)
        data = from_raw(body, dtype, tuple(dims), spec.name)
    tensor = Tensor(spec.name, spec.datatype, tuple(dims), data)
    context = request_context({}, "oip_rest", {BINARY_OUTPUT_KEY: True})
    return InferenceRequest(mv.name, [tensor], model_version=mv.version, context=context)


def _deduce(dims: list[int], size: int, itemsize: int, name: str) -> None:
    """``dims``' one variable dimension set from the byte count (in place)."""
    variable = [i for i, d in enumerate(dims) if d < 0]
    if len(variable) > 1:
        raise InvalidInput(
            f"the shape of the raw input '{name}' cannot be deduced: it has more than one "
            f"variable-sized dimension ({dims})"
        )
    row = math.prod(d for d in dims if d >= 0) * itemsize
    if variable:
        if row == 0 or size % row:
            raise InvalidInput(
                f"the raw input '{name}' has {size} bytes, not a whole number of {row}-byte "
                f"elements of shape {dims}"
            )
        dims[variable[0]] = size // row
