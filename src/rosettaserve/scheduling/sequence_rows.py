"""The arrays of one sequence batch: the clients' inputs, the control tensors and the implicit
states, one row per batch slot (``SequenceBatcher`` decides which request sits in which row).

A row without a request (a ``direct`` slot whose sequence sent nothing this time) holds zeros
and READY false, as Triton fills such a slot; without ``max_batch_size`` there is no batch
dimension and the one request's arrays go as they are, controls of shape ``[1]``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from rosettaserve.core.dtypes import DTYPES
from rosettaserve.core.errors import InvalidInput, ModelError
from rosettaserve.core.model import Arrays
from rosettaserve.core.registry import SequenceBatching, SequenceControl, SequenceState

SequenceId = int | str


@dataclass(frozen=True, slots=True)
class Row:
    """What one request brings to its row."""

    inputs: Arrays
    corrid: SequenceId
    start: bool
    end: bool
    states: dict[str, np.ndarray]  # input_name -> the sequence's state, without batch dimension


def initial_state(state: SequenceState) -> np.ndarray:
    """A sequence's first state: zeros of ``initial_state``'s dims, else of ``dims`` with 1 for
    each variable dimension (Triton leaves that one uninitialised; zeros here)."""
    return _zeros(initial_shape(state), DTYPES[state.datatype].numpy)


def initial_shape(state: SequenceState) -> tuple[int, ...]:
    dims = state.initial_dims if state.initial_dims is not None else state.dims
    return tuple(1 if d < 0 else d for d in dims)


def batch_arrays(
    settings: SequenceBatching, rows: list[Row | None], batched: bool
) -> dict[str, np.ndarray]:
    """The model's inputs for ``rows`` (None: an empty slot). ``batched``: the model has a batch
    dimension; else ``rows`` is one request."""
    real = next(row for row in rows if row is not None)
    if not batched:
        arrays = dict(real.inputs)
        for control in settings.controls:
            arrays[control.name] = _control(control, real).reshape(1)
        arrays.update(real.states)
        return arrays
    arrays = {}
    for name, first in real.inputs.items():
        blank = _zeros(first.shape, first.dtype)
        arrays[name] = np.concatenate([blank if r is None else r.inputs[name] for r in rows])
    for control in settings.controls:
        arrays[control.name] = np.concatenate(
            [_control(control, row).reshape(1, 1) for row in rows]
        )
    for name, state in real.states.items():
        blank = _zeros(state.shape, state.dtype)
        arrays[name] = np.stack([blank if r is None else r.states[name] for r in rows])
    return arrays


def _control(control: SequenceControl, row: Row | None) -> np.ndarray:
    if control.kind == "CORRID":
        return _corrid(control, row)
    if row is None:
        flag = False
    else:
        flag = {"START": row.start, "END": row.end, "READY": True}[control.kind]
    return np.array(control.false_true[int(flag)], dtype=np.int32)


def _corrid(control: SequenceControl, row: Row | None) -> np.ndarray:
    if control.datatype == "BYTES":
        value = b"" if row is None else str(row.corrid).encode()
        return np.array(value, dtype=object)
    return np.array(0 if row is None else row.corrid, dtype=np.uint64)


def check_corrid(settings: SequenceBatching, corrid: SequenceId, model: str) -> None:
    """A string id for a model whose CORRID control is UINT64 cannot be handed to it."""
    for control in settings.controls:
        if control.kind == "CORRID" and control.datatype == "UINT64" and isinstance(corrid, str):
            raise InvalidInput(
                f"inference request to model '{model}' has a string sequence id "
                f"{corrid!r}, but the model's {control.name} control is UINT64: send an integer"
            )


def split_result(
    result: Any, model: str, rows: list[Row | None], batched: bool
) -> list[dict[str, np.ndarray] | None]:
    """Each row's outputs (None for an empty slot)."""
    if not isinstance(result, Mapping):
        raise ModelError(
            f"model '{model}' returned {type(result).__name__}; predict must return "
            "a dict of output name to array"
        )
    arrays = {name: np.asarray(value) for name, value in result.items()}
    if not batched:
        return [arrays]
    for name, arr in arrays.items():
        if arr.ndim == 0 or arr.shape[0] != len(rows):
            got = "a scalar" if arr.ndim == 0 else f"{arr.shape[0]} rows"
            raise ModelError(
                f"model '{model}' returned {got} in output '{name}' for a batch of "
                f"{len(rows)} rows: a batched model must return one row per input row"
            )
    return [
        None if row is None else {name: arr[i : i + 1] for name, arr in arrays.items()}
        for i, row in enumerate(rows)
    ]


def next_states(
    states: tuple[SequenceState, ...], outputs: dict[str, np.ndarray], batched: bool
) -> dict[str, np.ndarray]:
    """The states a request's outputs carry to its sequence's next request (input_name ->
    array, without the batch dimension); a state the model did not return is not among them."""
    found = {}
    for state in states:
        value = outputs.get(state.output_name)
        if value is not None:
            found[state.input_name] = np.array(value[0] if batched else value)
    return found


def _zeros(shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    if dtype.hasobject:
        return np.full(shape, b"", dtype=object)
    return np.zeros(shape, dtype)
