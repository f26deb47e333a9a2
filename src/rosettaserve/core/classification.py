"""Triton's classification extension: a requested output with the parameter ``classification:
N`` (tritonclient's ``class_count``) is answered as its N largest values, each the string
``"<value>:<index>[:<label>]"``, largest first, per batch row, as BYTES of shape ``[rows, N]``
(``[N]`` without a batch dimension). N is at most the values a row has. Labels are the lines of
``labels.txt`` in the model's folder (``ModelVersion.extra[LABELS]``), by index."""

from __future__ import annotations

from typing import Final

import numpy as np

from rosettaserve.core.errors import InvalidInput
from rosettaserve.core.registry import ModelVersion
from rosettaserve.core.types import RequestedOutput, Tensor

KEY: Final = "classification"
LABELS: Final = "class_labels"  # ModelVersion.extra: labels.txt's lines
LABELS_FILE: Final = "labels.txt"


def classify_requested(
    mv: ModelVersion, requested: list[RequestedOutput], tensors: list[Tensor]
) -> None:
    """Each requested output that asks for classification, replaced by its classes (in place)."""
    for wanted in requested:
        count = wanted.parameters.get(KEY)
        if count is None:
            continue
        if type(count) is not int or count < 1:
            raise InvalidInput(
                f"output '{wanted.name}': 'classification' must be an integer >= 1, got {count!r}"
            )
        for i, tensor in enumerate(tensors):
            if tensor.name == wanted.name:
                tensors[i] = classes(tensor, count, mv.extra.get(LABELS) or [], mv.max_batch_size)


def classes(tensor: Tensor, count: int, labels: list[str], max_batch_size: int) -> Tensor:
    values = tensor.data
    if values.dtype.kind not in "biuf":
        raise InvalidInput(
            f"output '{tensor.name}' ({tensor.datatype}) cannot be classified: it holds no numbers"
        )
    batched = max_batch_size > 0 and values.ndim > 0
    rows = values.reshape(values.shape[0], -1) if batched else values.reshape(1, -1)
    k = min(count, rows.shape[1])
    out = np.empty((rows.shape[0], k), dtype=object)
    for r, row in enumerate(rows):
        order = np.argsort(-row.astype(np.float64), kind="stable")[:k]
        for j, index in enumerate(order):
            out[r, j] = _entry(row[index], int(index), labels)
    shape = out.shape if batched else (k,)
    return Tensor(tensor.name, "BYTES", shape, out.reshape(shape))


def _entry(value: np.generic, index: int, labels: list[str]) -> bytes:
    """As Triton writes it: a float with six decimals, an integer as it is."""
    shown = f"{float(value):f}" if value.dtype.kind == "f" else str(int(value))
    label = f":{labels[index]}" if index < len(labels) and labels[index] else ""
    return f"{shown}:{index}{label}".encode()
