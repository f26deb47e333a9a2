"""One JSON value <-> one tensor, with TF Serving's rules and error texts.

Reading: the shape comes from the first element at each level; every leaf must sit at that
depth, every list must have that length, and every leaf must suit the datatype (ints reject
``1.0``, bools reject ``0``/``1``, ...). A regular numeric array goes through one ``np.array``
call and vectorized kind and range checks; anything else (or anything those checks reject) is
walked element by element, which yields TF's exact error for the first offending value.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Iterable
from itertools import chain
from typing import Any

import numpy as np
import orjson

from rosettaserve.core import dtypes
from rosettaserve.core.codec import beyond_integers, check_elements, narrow, range_error
from rosettaserve.core.errors import InvalidInput, Unsupported
from rosettaserve.protocols.tfserving import floats, schema
from rosettaserve.protocols.tfserving.jsonio import snippet, type_name

_NUMPY = orjson.OPT_SERIALIZE_NUMPY
_B64_TEXT = re.compile(r"[A-Za-z0-9+/]*[=.]*")
# TF reads the narrow ints as int32 and narrows them without a check (128 as INT8 is -128):
# refused here, as every protocol refuses a value its datatype cannot hold.
_INT_RANGES = {
    "INT8": (-(2**7), 2**7 - 1),
    "INT16": (-(2**15), 2**15 - 1),
    "INT32": schema.INT32,
    "UINT8": (0, 2**8 - 1),
    "INT64": schema.INT64,
    "UINT32": schema.UINT32,
    "UINT64": schema.UINT64,
}
_FAST_KINDS = {"FP32": "iuf", "FP64": "iuf", "BOOL": "b", **dict.fromkeys(_INT_RANGES, "iu")}


def is_b64(value: Any) -> bool:
    """TF's test: an object with exactly one member, ``b64``, whose value is a string."""
    return isinstance(value, dict) and len(value) == 1 and isinstance(value.get("b64"), str)


def b64decode(text: str) -> bytes:
    """absl's lenient base64: standard alphabet, padding optional, whitespace ignored."""
    compact = "".join(text.split())
    if not _B64_TEXT.fullmatch(compact):
        raise InvalidInput("Unable to base64 decode")
    data = compact.rstrip("=.")
    if len(data) % 4 == 1:
        raise InvalidInput("Unable to base64 decode")
    try:
        return base64.b64decode(data + "=" * (-len(data) % 4), validate=True)
    except (binascii.Error, ValueError):
        raise InvalidInput("Unable to base64 decode") from None


# -- JSON -> array ----------------------------------------------------------------------------


def to_array(value: Any, datatype: str, maybe_bools: bool = True, name: str = "") -> np.ndarray:
    """The tensor a JSON value denotes for a signature input ``name`` of ``datatype``.

    ``maybe_bools``: the body has ``true``/``false`` somewhere, so numbers may hide booleans.
    A finite number beyond FP32's range is refused (TF narrows it to an infinity without a
    word); the tokens NaN, Infinity and -Infinity are values of their own, and stay."""
    fast = fast_array(value, datatype, maybe_bools, name)
    if fast is not None:
        return fast
    leaves, shape = walk(value, datatype, name)
    return leaves_array(leaves, shape, datatype, name)


def fast_array(value: Any, datatype: str, maybe_bools: bool, name: str = "") -> np.ndarray | None:
    """A regular numeric list in one vectorized conversion, or None: walk it instead."""
    if not isinstance(value, list) or datatype not in _FAST_KINDS:
        return None
    try:
        arr = np.array(value)
    except (ValueError, OverflowError, TypeError):
        return None
    target = dtypes.lookup(datatype).numpy
    if arr.size == 0:
        return np.empty(arr.shape, dtype=target)
    if arr.dtype.kind not in _FAST_KINDS[datatype]:
        return None
    if datatype in _INT_RANGES:
        low, high = _INT_RANGES[datatype]
        if int(arr.min()) < low or int(arr.max()) > high:
            return None
    if maybe_bools and arr.dtype.kind != "b" and _has_bool(value, arr.ndim):
        return None  # numpy reads [1, true] as [1, 1]; the walk names the bool
    if arr.dtype.kind in "iu" and target.kind == "f":
        arr = arr.astype(np.float64)  # TF reads every number as a double first
    return narrow(arr, dtypes.lookup(datatype), name)


def _has_bool(value: list[Any], depth: int) -> bool:
    """Is there a bool among the leaves of a regular nested list ``depth`` levels deep?"""
    items: Iterable[Any] = value
    for _ in range(depth - 1):
        items = chain.from_iterable(items)
    return bool in set(map(type, items))


def shape_of(value: Any) -> tuple[int, ...]:
    """TF's dense shape: descend through the first element of every list."""
    shape: list[int] = []
    while isinstance(value, list):
        shape.append(len(value))
        if not value:
            break
        value = value[0]
    return tuple(shape)


def walk(value: Any, datatype: str, name: str = "") -> tuple[list[Any], tuple[int, ...]]:
    """Every leaf in order, checked as TF checks them, and the shape (``name``: the tensor's,
    for the errors that can say it)."""
    shape = shape_of(value)
    rank = len(shape)
    leaves: list[Any] = []
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, level = stack.pop()
        if not isinstance(item, list):
            if level != rank:
                raise InvalidInput(
                    f"JSON Value: {snippet(item)} found at incorrect level: {level + 1} "
                    f"in the JSON DOM. Expected at level: {rank}"
                )
            leaves.append(leaf(item, datatype, name))
            continue
        if level >= rank:
            raise InvalidInput(f"Encountered list at unexpected level: {level} expected < {rank}")
        if len(item) != shape[level]:
            raise InvalidInput(
                f"Encountered list at unexpected size: {len(item)} at level: {level} "
                f"expected size: {shape[level]}"
            )
        if level == rank - 1:
            leaves.extend(_leaves(item, datatype, rank, name))
        else:
            stack.extend((child, level + 1) for child in reversed(item))
    return leaves, shape


_PLAIN: dict[str, tuple[set[type], Any]] = {
    "FP32": ({int, float}, float),
    "FP64": ({int, float}, float),
    "BOOL": ({bool}, None),
    "BYTES": ({str}, str.encode),
    **{d: ({int}, None) for d in _INT_RANGES},
}


def _leaves(items: list[Any], datatype: str, rank: int, name: str) -> list[Any]:
    """The innermost list's leaves: all at once when they are plain, else one by one."""
    types, convert = _PLAIN.get(datatype, (set(), None))
    if items and set(map(type, items)) <= types:
        if datatype not in _INT_RANGES:
            return items if convert is None else list(map(convert, items))
        low, high = _INT_RANGES[datatype]
        if low <= min(items) and max(items) <= high:
            return items
    out = []
    for item in items:
        if isinstance(item, list):
            raise InvalidInput(f"Encountered list at unexpected level: {rank} expected < {rank}")
        out.append(leaf(item, datatype, name))
    return out


def leaf(value: Any, datatype: str, name: str = "") -> Any:
    """One JSON leaf as a Python value of the datatype, or TF's error."""
    if isinstance(value, dict):
        if datatype != "BYTES":
            raise _type_error(value, datatype)
        if not is_b64(value):
            raise InvalidInput(
                f"JSON Value: {snippet(value)} not formatted correctly for base64 data"
            )
        return b64decode(value["b64"])
    if datatype in ("FP32", "FP64"):
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise _type_error(value, datatype)
        return float(value)
    if datatype in _INT_RANGES:
        low, high = _INT_RANGES[datatype]
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise _type_error(value, datatype, name)
        return value
    if datatype == "BOOL":
        if not isinstance(value, bool):
            raise _type_error(value, datatype)
        return value
    if datatype == "BYTES":
        if not isinstance(value, str):
            raise _type_error(value, datatype)
        return value.encode()
    raise Unsupported(
        f"Conversion of JSON Value: {snippet(value)} to type: {schema.tf_type(datatype).short}"
    )


def _type_error(value: Any, datatype: str, name: str = "") -> InvalidInput:
    """TF's text; for an integer beyond an integer datatype, what the range is, as every
    protocol says it (a JSON integer past 64 bits is read as a float)."""
    text = (
        f"JSON Value: {snippet(value)} Type: {type_name(value)} is not of expected type: "
        f"{schema.tf_type(datatype).short}"
    )
    if datatype in _INT_RANGES and not isinstance(value, bool):
        dtype = dtypes.lookup(datatype)
        if type(value) is int or beyond_integers(value, dtype):
            text += f" ({range_error(value, dtype, name)})"
    return InvalidInput(text)


def leaves_array(
    leaves: list[Any], shape: tuple[int, ...], datatype: str, name: str = ""
) -> np.ndarray:
    dtype = dtypes.lookup(datatype)
    target = dtype.numpy
    if datatype == "BYTES":
        check_elements(len(leaves), name, False)  # as every protocol bounds BYTES (core/codec.py)
        out = np.empty(len(leaves), dtype=object)
        out[:] = leaves
        return out.reshape(shape)
    if datatype in ("FP32", "FP64"):
        return narrow(np.array(leaves, dtype=np.float64), dtype, name).reshape(shape)
    if datatype in _INT_RANGES:
        wide = np.uint64 if datatype == "UINT64" else np.int64
        return np.array(leaves, dtype=wide).astype(target).reshape(shape)
    return np.array(leaves, dtype=target).reshape(shape)


# -- array -> JSON ----------------------------------------------------------------------------


def to_json(arr: np.ndarray, datatype: str, alias: str) -> bytes:
    """A whole output tensor as TF writes it (``*_bytes`` BYTES outputs as base64 objects)."""
    if datatype in ("FP32", "FP64"):
        return floats.array_json(arr)
    if not schema.tf_type(datatype).json:
        if arr.size:
            raise InvalidInput(
                f"Failed to write JSON value for tensor type: {schema.tf_type(datatype).short}"
            )
        arr = arr.astype(np.float32)  # nothing to write but the nesting
    if datatype == "BYTES":
        return orjson.dumps(_strings(arr, alias))
    if arr.ndim == 0:
        return orjson.dumps(arr[()], option=_NUMPY)
    return orjson.dumps(np.ascontiguousarray(arr), option=_NUMPY)


def rows_to_json(arr: np.ndarray, datatype: str, alias: str) -> list[bytes]:
    """``to_json`` of each ``arr[i]``: the per-row values of a row-format response."""
    if datatype in ("FP32", "FP64"):
        return floats.array_rows_json(arr)
    return [
        to_json(arr[i : i + 1].reshape(arr.shape[1:]), datatype, alias) for i in range(len(arr))
    ]


def _strings(arr: np.ndarray, alias: str) -> Any:
    """Nested lists of str, or of {"b64": ...} when the output's name ends in ``_bytes``.

    TF writes other strings as raw bytes, which is invalid JSON when they are not UTF-8;
    here such bytes become U+FFFD (name the output ``*_bytes`` to get them exactly)."""
    as_b64 = alias.endswith(schema.BYTES_SUFFIX)
    flat = arr.reshape(-1)
    out = np.empty(flat.size, dtype=object)
    for i, item in enumerate(flat):
        raw = item if isinstance(item, bytes) else str(item).encode()
        out[i] = (
            {"b64": base64.b64encode(raw).decode()} if as_b64 else raw.decode("utf-8", "replace")
        )
    return out.reshape(arr.shape).tolist() if arr.ndim else out[0]
