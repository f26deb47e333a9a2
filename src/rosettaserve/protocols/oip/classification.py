"""Triton's classification extension: a requested output with the parameter ``classification: N``
(tritonclient's ``class_count``) is answered as its N largest values, each the string
``"score:index"`` or, where the model folder's labels.txt names that index, ``"score:index:label"``
(a BYTES tensor; one row of them per batch entry when the model batches)."""

from __future__ import annotations

from typing import Final

import numpy as np

from rosettaserve.core import dtypes
from rosettaserve.core.errors import InvalidInput
from rosettaserve.core.registry import ModelVersion
from rosettaserve.core.types import InferenceRequest, InferenceResponse, RequestedOutput, Tensor

CLASSIFICATION: Final = "classification"
COUNTS: Final = "classification_counts"  # request.context: output name -> its class count
MAX_ELEMENTS: Final = 1_000_000  # values ranked in one output (Triton's bound)
_RANKED: Final = frozenset(
    ["UINT8", "UINT16", "UINT32", "UINT64", "INT8", "INT16", "INT32", "INT64", "FP32", "FP64"]
)


def class_counts(outputs: list[RequestedOutput] | None) -> dict[str, int] | None:
    """The requested outputs answered as classes, and how many classes each (checked)."""
    if not outputs:
        return None
    counts: dict[str, int] = {}
    for out in outputs:
        if not out.parameters or CLASSIFICATION not in out.parameters:
            continue
        count = out.parameters[CLASSIFICATION]
        if type(count) is not int or count < 0:
            raise InvalidInput(
                f"invalid value for '{CLASSIFICATION}' parameter of output '{out.name}': "
                f"expected a non-negative integer, got {count!r}"
            )
        if count:  # 0: not a classification (what tritonclient's class_count=0 means)
            counts[out.name] = count
    return counts or None


def note_outputs(request: InferenceRequest) -> None:
    counts = class_counts(request.outputs)
    if counts is not None:
        request.context[COUNTS] = counts


def classify(mv: ModelVersion, request: InferenceRequest, response: InferenceResponse) -> None:
    """Each output requested as classes replaced by its class strings."""
    counts: dict[str, int] | None = request.context.get(COUNTS)
    if counts is None:
        return
    for i, tensor in enumerate(response.outputs):
        count = counts.get(tensor.name)
        if count is not None:
            response.outputs[i] = _classes(tensor, count, mv)


def _classes(tensor: Tensor, count: int, mv: ModelVersion) -> Tensor:
    if tensor.datatype not in _RANKED:
        raise InvalidInput(
            f"class result not available for output due to unsupported type '{tensor.datatype}'"
        )
    if tensor.data.size > MAX_ELEMENTS:
        raise InvalidInput("classification output tensor too large")
    batched = mv.max_batch_size > 0 and tensor.data.ndim > 0
    rows = tensor.data.reshape(tensor.data.shape[0], -1) if batched else tensor.data.reshape(1, -1)
    kept = min(count, rows.shape[1])
    texts = [_top(row, kept, mv.class_labels, tensor.datatype) for row in rows]
    data = np.array([t for row in texts for t in row], dtype=object)
    shape = (rows.shape[0], kept) if batched else (kept,)
    return Tensor(tensor.name, dtypes.lookup("BYTES").name, shape, data.reshape(shape))


def _top(row: np.ndarray, kept: int, labels: list[str], datatype: str) -> list[bytes]:
    """The ``kept`` largest values, largest first (equal values: lower index first)."""
    n = row.size
    order = (n - 1 - np.argsort(row[::-1], kind="stable"))[::-1][:kept]
    scored = "%f" if datatype in ("FP32", "FP64") else "%d"
    texts = []
    for index in order.tolist():
        text = f"{scored % row[index]}:{index}"
        if index < len(labels) and labels[index]:  # (an empty line of labels.txt: none)
            text += f":{labels[index]}"
        texts.append(text.encode())
    return texts
