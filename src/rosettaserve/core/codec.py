"""Tensor codecs shared by every protocol: shapes, raw little-endian buffers, JSON lists.

Every check that bounds an allocation runs before the allocation: a shape is
validated and its byte size compared with the bytes actually present first.
"""

from __future__ import annotations

import struct
from typing import Any

import numpy as np

from rosettaserve.core.dtypes import DType
from rosettaserve.core.errors import InvalidInput

MAX_DIMS = 64
_LEN = struct.Struct("<I")
Buffer = bytes | bytearray | memoryview


def check_shape(shape: Any, name: str) -> tuple[int, ...]:
    """A shape as a tuple of non-negative ints, or a 400 that says what is wrong."""
    if not isinstance(shape, list | tuple):
        raise InvalidInput(f"'shape' of tensor '{name}' must be a list of integers")
    if len(shape) > MAX_DIMS:
        raise InvalidInput(f"'shape' of tensor '{name}' has {len(shape)} dims (max {MAX_DIMS})")
    for dim in shape:
        if type(dim) is not int:
            raise InvalidInput(f"'shape' of tensor '{name}' must hold integers, got {dim!r}")
        if dim < 0:
            raise InvalidInput(
                f"'shape' of tensor '{name}' has a negative dimension: {list(shape)}"
            )
    return tuple(shape)


def element_count(shape: tuple[int, ...]) -> int:
    count = 1
    for dim in shape:
        count *= dim
    return count


def from_raw(buf: Buffer, dtype: DType, shape: tuple[int, ...], name: str) -> np.ndarray:
    """Decode a packed little-endian buffer (BYTES: 4-byte length prefixes) without copying."""
    count = element_count(shape)
    if dtype.is_bytes:
        return _bytes_from_raw(memoryview(buf), count, name).reshape(shape)
    expected = count * dtype.itemsize
    if len(buf) != expected:
        raise InvalidInput(
            f"tensor '{name}' of datatype {dtype.name} and shape {list(shape)} needs "
            f"{expected} bytes, but {len(buf)} were sent"
        )
    return np.frombuffer(buf, dtype=dtype.numpy).reshape(shape)


def _bytes_from_raw(view: memoryview, count: int, name: str) -> np.ndarray:
    size = len(view)
    if count * _LEN.size > size:
        raise InvalidInput(
            f"BYTES tensor '{name}' declares {count} elements but only {size} bytes were sent "
            "(each element needs a 4-byte length prefix)"
        )
    out = np.empty(count, dtype=object)
    offset = 0
    for i in range(count):
        if offset + _LEN.size > size:
            raise InvalidInput(f"BYTES tensor '{name}' ends inside the length of element {i}")
        (length,) = _LEN.unpack_from(view, offset)
        offset += _LEN.size
        if offset + length > size:
            raise InvalidInput(
                f"BYTES tensor '{name}' element {i} declares {length} bytes, "
                "past the end of the data"
            )
        out[i] = bytes(view[offset : offset + length])
        offset += length
    if offset != size:
        raise InvalidInput(
            f"BYTES tensor '{name}' has {size - offset} bytes after its {count} elements"
        )
    return out


def to_raw(data: np.ndarray, dtype: DType) -> Buffer:
    """Encode an array as the packed wire form (a view where no copy is needed)."""
    if dtype.is_bytes:
        parts: list[bytes] = []
        for item in data.ravel():
            raw = as_bytes(item)
            parts.append(_LEN.pack(len(raw)))
            parts.append(raw)
        return b"".join(parts)
    contiguous = np.ascontiguousarray(data, dtype=dtype.numpy)
    return memoryview(contiguous.data).cast("B")


def as_bytes(item: Any) -> bytes:
    if isinstance(item, bytes):
        return item
    if isinstance(item, str):
        return item.encode()
    if isinstance(item, bytearray | memoryview | np.bytes_):
        return bytes(item)
    return str(item).encode()


def bytes_array(items: Any) -> np.ndarray:
    """An object array of ``bytes`` from an array or list of str/bytes."""
    arr = np.asarray(items, dtype=object)
    out = np.empty(arr.shape, dtype=object)
    flat_in, flat_out = arr.ravel(), out.reshape(-1)
    for i in range(flat_in.size):
        flat_out[i] = as_bytes(flat_in[i])
    return out


def from_json(data: Any, dtype: DType, shape: tuple[int, ...], name: str) -> np.ndarray:
    """Decode nested or flat JSON ``data``, checking kinds, ranges and element count."""
    count = element_count(shape)
    if not dtype.json_ok:
        raise InvalidInput(
            f"{dtype.name} data for tensor '{name}' cannot be sent as JSON; "
            "send it with the binary tensor data extension"
        )
    if not isinstance(data, list):
        data = [data]
    if dtype.is_bytes:
        flat = _flatten_strings(data, name)
        _check_count(len(flat), count, shape, name)
        out = np.empty(count, dtype=object)
        for i, item in enumerate(flat):
            out[i] = item.encode() if isinstance(item, str) else item
        return out.reshape(shape)
    if len(data) > count and _is_flat(data):
        _check_count(len(data), count, shape, name)
    try:
        arr = np.asarray(data)
    except (ValueError, OverflowError):
        raise InvalidInput(
            f"'data' of tensor '{name}' is ragged or holds mixed types: "
            "nested lists must all have the same length"
        ) from None
    _check_count(arr.size, count, shape, name)
    return _coerce(arr, dtype, name).reshape(shape)


def _is_flat(data: list[Any]) -> bool:
    return not data or not isinstance(data[0], list)


def _check_count(got: int, expected: int, shape: tuple[int, ...], name: str) -> None:
    if got != expected:
        raise InvalidInput(
            f"tensor '{name}' has shape {list(shape)} ({expected} elements) "
            f"but its 'data' holds {got} elements"
        )


def _flatten_strings(data: list[Any], name: str) -> list[str | bytes]:
    flat: list[str | bytes] = []
    stack: list[Any] = [iter(data)]
    while stack:
        for item in stack[-1]:
            if isinstance(item, list):
                stack.append(iter(item))
                break
            if not isinstance(item, str):
                raise InvalidInput(
                    f"BYTES tensor '{name}' must hold JSON strings, got {type(item).__name__}"
                )
            flat.append(item)
        else:
            stack.pop()
    return flat


_KIND_NAMES = {"b": "booleans", "i": "integers", "u": "integers", "f": "numbers"}


def _coerce(arr: np.ndarray, dtype: DType, name: str) -> np.ndarray:
    target = dtype.numpy
    if arr.size == 0:
        return np.empty(arr.shape, dtype=target)
    kind, want = arr.dtype.kind, target.kind
    allowed = {"b": "b", "i": "iu", "u": "iu", "f": "iuf"}[want]
    if kind not in allowed:
        got = _KIND_NAMES.get(kind, "non-numeric values")
        raise InvalidInput(
            f"tensor '{name}' of datatype {dtype.name} must hold JSON {_KIND_NAMES[want]}, "
            f"got {got}"
        )
    if want in "iu" and arr.dtype != target:
        info = np.iinfo(target)
        low, high = int(arr.min()), int(arr.max())
        if low < info.min or high > info.max:
            raise InvalidInput(
                f"tensor '{name}' holds values outside the {dtype.name} range "
                f"[{info.min}, {info.max}]"
            )
    return arr.astype(target, copy=False)
