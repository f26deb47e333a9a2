"""A model's answer as response tensors, held to the outputs its version declares.

Every runtime's answer (python, onnx, sklearn, a model in worker processes, each item of a
stream) becomes an ``InferenceResponse`` here, once. Where a version declares its outputs:
- only declared outputs are served (others are dropped, as Triton drops what its config does
  not list), the requested ones or else all of them, and each one served must be there;
- each fits its declaration: its datatype without loss (``dtypes.exact_cast``; BYTES from bytes
  or str), its shape (-1: any size), and, when ``max_batch_size`` > 0, as many rows as the
  request has.
Anything else is the model's fault: a ``ModelError`` (500) naming the model, the output and what
was wrong. A version that declares no outputs is served what it returns, typed as numpy types it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from rosettaserve.core import dtypes
from rosettaserve.core.classification import KEY as CLASSIFICATION
from rosettaserve.core.classification import classify_requested
from rosettaserve.core.codec import bytes_array
from rosettaserve.core.errors import InvalidInput, ModelError
from rosettaserve.core.registry import ModelVersion, Signature
from rosettaserve.core.types import InferenceRequest, InferenceResponse, Tensor, shape_matches


def to_response(mv: ModelVersion, request: InferenceRequest, result: Any) -> InferenceResponse:
    if type(result) is not dict and not isinstance(result, Mapping):
        raise ModelError(
            f"model '{mv.name}' returned {type(result).__name__}; predict must return "
            "a dict of output name to array"
        )
    sig = mv.signature()
    if sig.outputs:
        tensors = declared_tensors(mv, sig, request, result)
    else:
        tensors = [undeclared_tensor(mv, name, value) for name, value in result.items()]
    if request.outputs is not None:
        for wanted in request.outputs:  # (compiled: a few ns an output asked for by name)
            if wanted.parameters and CLASSIFICATION in wanted.parameters:
                classify_requested(mv, request.outputs, tensors)
                break
    return InferenceResponse(
        model_name=mv.name,
        model_version=mv.version,
        outputs=tensors,
        id=request.id,
    )


def batch_rows(mv: ModelVersion, request: InferenceRequest) -> int:
    """The request's batch size when the model has a batch dimension; else -1."""
    if mv.max_batch_size > 0 and request.inputs and request.inputs[0].shape:
        return request.inputs[0].shape[0]
    return -1


def declared_tensors(
    mv: ModelVersion, sig: Signature, request: InferenceRequest, result: Mapping[str, Any]
) -> list[Tensor]:
    names = sig.output_names if request.outputs is None else [o.name for o in request.outputs]
    rows = batch_rows(mv, request)
    tensors = []
    for name in names:
        if name not in result:
            raise ModelError(
                f"model '{mv.name}' version {mv.version} did not return its declared output "
                f"'{name}' (it returned {list(result)})"
            )
        tensors.append(declared_tensor(mv, sig, name, result[name], rows))
    return tensors


def declared_tensor(mv: ModelVersion, sig: Signature, name: str, value: Any, rows: int) -> Tensor:
    spec = sig.output_specs[name]
    arr = value if type(value) is np.ndarray or isinstance(value, np.ndarray) else None
    if arr is None:
        arr = _as_array(mv, name, value)
    shape: tuple[int, ...] = arr.shape
    if not shape_matches(spec.shape, shape) or (rows >= 0 and shape and shape[0] != rows):
        raise ModelError(_shape_problem(mv, name, spec.shape, shape, rows))
    dt = sig.output_types[name]
    if dt is None:
        raise ModelError(
            f"model '{mv.name}' version {mv.version} declares output '{name}' as "
            f"{spec.datatype!r}, which is no datatype; expected one of {', '.join(dtypes.DTYPES)}"
        )
    try:
        if dt.is_bytes:
            arr = text_array(arr)
        elif arr.dtype is not dt.numpy and arr.dtype != dt.numpy:  # (numpy's own dtypes are
            arr = dtypes.exact_cast(arr, dt)  # one object each) [cost: dtype-is]
    except (TypeError, ValueError) as exc:
        raise ModelError(
            f"model '{mv.name}' version {mv.version} returned output '{name}', declared "
            f"{dt.name}, that {exc}"
        ) from None
    return Tensor(name, dt.name, shape, arr)


def _as_array(mv: ModelVersion, name: str, value: Any) -> np.ndarray:
    if value is None:
        raise ModelError(
            f"model '{mv.name}' version {mv.version} returned None for output '{name}'"
        )
    try:
        return np.asarray(value)
    except (TypeError, ValueError) as exc:  # ragged lists, objects numpy cannot take
        raise ModelError(
            f"model '{mv.name}' version {mv.version} returned output '{name}' as "
            f"{type(value).__name__}, which is no array: {exc}"
        ) from None


def _shape_problem(
    mv: ModelVersion, name: str, spec: tuple[int, ...], shape: tuple[int, ...], rows: int
) -> str:
    which = f"model '{mv.name}' version {mv.version} returned output '{name}'"
    if shape_matches(spec, shape):
        return (
            f"{which} with {shape[0]} rows, but the request has a batch of {rows} "
            "(max_batch_size > 0: the first dimension is the batch dimension)"
        )
    return f"{which} with shape {list(shape)}, but declares {list(spec)} (-1 = any size)"


def text_array(arr: np.ndarray) -> np.ndarray:
    """A BYTES output: an object array of ``bytes``, from bytes or str elements only."""
    if arr.dtype.kind not in "OSU":
        raise TypeError(f"holds {arr.dtype} values, not bytes or str")
    out = np.empty(arr.shape, dtype=object)
    flat_in, flat_out = arr.ravel(), out.reshape(-1)
    for i in range(flat_in.size):
        item = flat_in[i]
        if isinstance(item, bytes):
            flat_out[i] = item
        elif isinstance(item, str):
            flat_out[i] = item.encode()
        elif isinstance(item, bytearray | memoryview):
            flat_out[i] = bytes(item)
        else:
            raise TypeError(f"holds a {type(item).__name__} element, not bytes or str")
    return out


def undeclared_tensor(mv: ModelVersion, name: str, value: Any) -> Tensor:
    """An output of a version that declares none: typed as numpy types the returned value."""
    try:
        arr = value if isinstance(value, np.ndarray) else np.asarray(value)
        dt = dtypes.from_numpy(arr.dtype)
        if dt.is_bytes:
            arr = bytes_array(arr)
    except (TypeError, ValueError, InvalidInput) as exc:
        raise ModelError(f"model '{mv.name}' returned an unusable output '{name}': {exc}") from exc
    return Tensor(name, dt.name, arr.shape, arr)
