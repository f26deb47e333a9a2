"""Tensor codecs shared by every protocol: shapes, raw little-endian buffers, JSON lists.

Every check that bounds an allocation runs before the allocation: a shape is
validated and its byte size compared with the bytes actually present first.

A BYTES tensor is an object per element: its element count is bounded by the bytes present
(4 bytes of length each, in the binary form) and by ``MAX_BYTES_ELEMENTS``, both checked
before anything is allocated. Its elements are decoded one by one; called with ``inline``
(on the event loop), a tensor of more than ``INLINE_ELEMENTS`` raises LargeWork instead, and
its request is decoded again on the request-work threads (core/executor.py).
"""

from __future__ import annotations

import importlib
import struct
from typing import Any

import ml_dtypes
import numpy as np
import orjson

from rosettaserve.core.dtypes import DTYPES, DType
from rosettaserve.core.errors import InvalidInput
from rosettaserve.core.executor import LET_OTHERS_RUN, LargeWork, let_others_run

MAX_DIMS = 64
# beyond any tensor: numpy refuses such a shape even with a 0 in it (without one, no data can
# match the shape's count)
MAX_ELEMENTS = 1 << 56
# The most elements of one BYTES tensor: each is a Python object (~40 bytes and more), so 4M of
# them hold some 160 MB however few bytes they carry.
MAX_BYTES_ELEMENTS = 1 << 22
# The most elements decoded one by one on the event loop (a few ms) [cost: bytes-elements].
INLINE_ELEMENTS = 1 << 14
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
    if 0 in shape and element_count(tuple(dim for dim in shape if dim)) > MAX_ELEMENTS:
        raise InvalidInput(f"'shape' of tensor '{name}' is beyond any tensor: {list(shape)}")
    return tuple(shape)


def element_count(shape: tuple[int, ...]) -> int:
    count = 1
    for dim in shape:
        count *= dim
    return count


def check_elements(count: int, name: str, inline: bool) -> None:
    """A BYTES tensor of ``count`` elements: InvalidInput past MAX_BYTES_ELEMENTS; LargeWork
    past INLINE_ELEMENTS when decoded ``inline`` (on the event loop)."""
    if count > INLINE_ELEMENTS:
        if count > MAX_BYTES_ELEMENTS:
            raise InvalidInput(
                f"BYTES tensor '{name}' has {count} elements; at most {MAX_BYTES_ELEMENTS} "
                "are taken in one tensor"
            )
        if inline:
            raise LargeWork


def from_raw(
    buf: Buffer, dtype: DType, shape: tuple[int, ...], name: str, inline: bool = False
) -> np.ndarray:
    """Decode a packed little-endian buffer (BYTES: 4-byte length prefixes) without copying."""
    count = element_count(shape)
    if dtype.is_bytes:
        return _bytes_from_raw(memoryview(buf), count, name, inline).reshape(shape)
    expected = count * dtype.itemsize
    if len(buf) != expected:
        raise InvalidInput(
            f"tensor '{name}' of datatype {dtype.name} and shape {list(shape)} needs "
            f"{expected} bytes, but {len(buf)} were sent"
        )
    return np.frombuffer(buf, dtype=dtype.numpy).reshape(shape)


def _bytes_from_raw(view: memoryview, count: int, name: str, inline: bool) -> np.ndarray:
    size = len(view)
    if count * _LEN.size > size:
        raise InvalidInput(
            f"BYTES tensor '{name}' declares {count} elements but only {size} bytes were sent "
            "(each element needs a 4-byte length prefix)"
        )
    check_elements(count, name, inline)
    out = np.empty(count, dtype=object)
    offset = 0
    for i in range(count):
        if i & LET_OTHERS_RUN == LET_OTHERS_RUN:
            let_others_run()  # (a long decode is on the request-work threads)
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


def to_raw(data: np.ndarray, dtype: DType, inline: bool = False) -> Buffer:
    """Encode an array as the packed wire form (a view where no copy is needed); ``inline``:
    LargeWork for a BYTES array too large to encode on the event loop (one by one)."""
    if dtype.is_bytes:
        if inline and data.size > INLINE_ELEMENTS:
            raise LargeWork
        parts: list[bytes] = []
        for i, item in enumerate(data.ravel()):
            if i & LET_OTHERS_RUN == LET_OTHERS_RUN:
                let_others_run()
            raw = as_bytes(item)
            parts.append(_LEN.pack(len(raw)))
            parts.append(raw)
        return b"".join(parts)
    contiguous = np.ascontiguousarray(data, dtype=dtype.numpy).reshape(-1)
    return contiguous.view(np.uint8).data  # a byte view works for bfloat16 and empty arrays too


def raw_bytes(data: np.ndarray, dtype: DType, inline: bool = False) -> bytes:
    """``to_raw`` as one bytes object, what a protobuf bytes field takes (one copy, no views)."""
    if dtype.is_bytes:
        return bytes(to_raw(data, dtype, inline))
    return data.astype(dtype.numpy, copy=False).tobytes()


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
        if i & LET_OTHERS_RUN == LET_OTHERS_RUN:
            let_others_run()
        flat_out[i] = as_bytes(flat_in[i])
    return out


def from_json(
    data: Any, dtype: DType, shape: tuple[int, ...], name: str, inline: bool = False
) -> np.ndarray:
    """Decode nested or flat JSON ``data``, checking kinds, ranges and element count."""
    count = element_count(shape)
    if not dtype.json_ok:
        raise InvalidInput(
            f"{dtype.name} data for tensor '{name}' cannot be sent as JSON; "
            "send it with the binary tensor data extension"
        )
    if isinstance(data, np.ndarray):  # a flat array of plain numbers, read in bulk
        check_count(data.size, count, shape, name)
        if dtype.is_bytes:
            raise InvalidInput(f"tensor '{name}' of datatype BYTES must hold JSON strings")
        return _coerce(data, dtype, name).reshape(shape)
    if not isinstance(data, list):
        data = [data]
    if dtype.is_bytes:  # an object per element, made one by one: bounded first
        check_elements(count, name, inline)
    if _is_flat(data):
        check_count(len(data), count, shape, name)  # cheap, before any conversion
        if len(data) <= SMALL_LIST and not dtype.is_bytes:
            plain = _plain_array(data, dtype)
            if plain is not None:
                return plain.reshape(shape)
    convert = _python_array if dtype.is_bytes else _numeric_array
    arr = convert(data, dtype, name, inline)
    check_count(arr.size, count, shape, name)
    return arr.reshape(shape)


def _is_flat(data: list[Any]) -> bool:
    return not data or not (isinstance(data[0], list) or isinstance(data[-1], list))


def from_values(
    values: Any, carrier: np.dtype, dtype: DType, shape: tuple[int, ...], name: str
) -> np.ndarray:
    """Typed wire values (a protobuf repeated field) held in ``carrier``, a type at least as wide
    as ``dtype``: the count is checked first, then the range where the carrier is wider."""
    check_count(len(values), element_count(shape), shape, name)
    wide = np.asarray(values, dtype=carrier)
    if wide.dtype == dtype.numpy:
        return wide.reshape(shape)
    if wide.size and dtype.numpy.kind in "iu" and dtype.numpy.itemsize < wide.dtype.itemsize:
        check_range(int(wide.min()), int(wide.max()), dtype, name)
    return narrow(wide, dtype, name).reshape(shape)


def check_count(got: int, expected: int, shape: tuple[int, ...], name: str) -> None:
    if got != expected:
        raise InvalidInput(
            f"tensor '{name}' has shape {list(shape)} ({expected} elements) "
            f"but its 'data' holds {got} elements"
        )


def _numeric_array(data: list[Any], dtype: DType, name: str, inline: bool) -> np.ndarray:
    """numpy's C conversion when it is exact; the element-by-element path when it is not."""
    try:
        arr = np.asarray(data)
    except (ValueError, OverflowError):
        return _python_array(data, dtype, name, inline)
    want, kind = dtype.numpy.kind, arr.dtype.kind
    if kind == "O" or (want in "iu" and kind == "f") or (kind in "iuf" and _has_bool(data)):
        return _python_array(data, dtype, name, inline)  # big ints, bools among numbers, ragged
    return _coerce(arr, dtype, name)


def _has_bool(data: list[Any]) -> bool:
    """Does a list that numpy read as numbers hide JSON booleans? (numbers never hold t or f)"""
    text = orjson.dumps(data)
    # find, not ``in``: compiled, ``in`` on bytes first tries its operand as an int and clears the
    # TypeError; this runs on every JSON number tensor [cost: bytes-find]
    return text.find(b"t") >= 0 or text.find(b"f") >= 0


def _python_array(data: list[Any], dtype: DType, name: str, inline: bool) -> np.ndarray:
    try:
        nested = np.array(data, dtype=object)
    except ValueError:
        raise InvalidInput(
            f"'data' of tensor '{name}' is ragged or nested too deeply: nested lists must all "
            "have the same length, and the data at most 64 levels deep"
        ) from None
    flat = nested.reshape(-1)
    if dtype.is_bytes:  # what the data holds (its shape is checked after)
        check_elements(flat.size, name, inline)
    elif inline and flat.size > INLINE_ELEMENTS:  # checked and converted one by one
        raise LargeWork
    _check_elements(flat, dtype, name)
    if dtype.is_bytes:
        return bytes_array(flat).reshape(nested.shape)
    return _coerce(flat, dtype, name).reshape(nested.shape)


_ACCEPTS: dict[str, tuple[type, ...]] = {"b": (bool,), "i": (int,), "u": (int,), "f": (int, float)}
_KIND_NAMES = {"b": "booleans", "i": "integers", "u": "integers", "f": "numbers", "O": "strings"}


# A flat list of at most this many elements is checked element by element (type and range, in
# one pass) and converted in one call; a longer one costs less the numpy
# way (one conversion, then a look for booleans in its JSON text).
SMALL_LIST = 256


def _json_range(numpy: np.dtype) -> tuple[frozenset[type], int | float, int | float]:
    """The exact Python types a JSON list of this dtype may hold (``_ACCEPTS``; a bool is only a
    bool), and the range its values must be in."""
    kinds = frozenset(_ACCEPTS[numpy.kind])
    if numpy.kind == "b":
        return kinds, 0, 1
    if numpy.kind in "iu":
        info = np.iinfo(numpy)
        return kinds, int(info.min), int(info.max)
    top = float(np.finfo(numpy).max)
    return kinds, -top, top


_JSON_RANGES = {
    d.numpy: _json_range(d.numpy) for d in DTYPES.values() if d.json_ok and not d.is_bytes
}


def _plain_array(data: list[Any], dtype: DType) -> np.ndarray | None:
    """A short flat list of only the JSON kind ``dtype`` takes, all in its range, as an array;
    None for anything else (booleans among numbers, strings, out of range...): the general path
    then converts it or says what is wrong."""
    accepted = _JSON_RANGES.get(dtype.numpy)
    if accepted is None or not data:
        return None
    kinds, low, high = accepted
    for value in data:  # one pass (compiled, it costs a third of set(map(type)), min and max)
        if type(value) not in kinds or value < low or value > high:
            return None
    return np.array(data, dtype=dtype.numpy)


def _check_elements(flat: np.ndarray, dtype: DType, name: str) -> None:
    want = "O" if dtype.is_bytes else dtype.numpy.kind
    accepts = (str,) if want == "O" else _ACCEPTS[want]
    for i, item in enumerate(flat):
        if i & LET_OTHERS_RUN == LET_OTHERS_RUN:
            let_others_run()
        if isinstance(item, list):
            raise InvalidInput(
                f"'data' of tensor '{name}' is ragged: nested lists must all have the same length"
            )
        ok = isinstance(item, accepts) and (want == "b" or not isinstance(item, bool))
        if not ok and want in "iu" and beyond_integers(item, dtype):
            raise range_error(item, dtype, name)
        if not ok:
            raise InvalidInput(
                f"tensor '{name}' of datatype {dtype.name} must hold JSON "
                f"{_KIND_NAMES[want]}, got {_json_kind(item)} {item!r:.40}"
            )


def _json_kind(item: Any) -> str:
    names = {bool: "boolean", int: "integer", float: "number", str: "string", list: "list"}
    return names.get(type(item), "null" if item is None else type(item).__name__)


# the kinds of numbers read from JSON that a datatype of each kind takes (a constant: built in
# _coerce, this dict was built per request) [cost: read-as]
_READ_AS = {"b": "b", "i": "iu", "u": "iu", "f": "iuf"}


def _coerce(arr: np.ndarray, dtype: DType, name: str) -> np.ndarray:
    target = dtype.numpy
    if arr.size == 0:
        return np.empty(arr.shape, dtype=target)
    kind, want = arr.dtype.kind, target.kind
    if kind == "O":  # Python objects, already checked element by element
        if want in "iu":
            check_range(int(min(arr)), int(max(arr)), dtype, name)
        try:
            if want == "f":  # through float64, as JSON numbers are read, then narrowed
                return narrow(np.array(arr.tolist(), dtype=np.float64), dtype, name)
            return np.array(arr.tolist(), dtype=target)
        except OverflowError:  # an integer past even float64
            raise InvalidInput(
                f"tensor '{name}' holds a number outside the {dtype.name} range"
            ) from None
    if kind not in _READ_AS[want]:
        raise InvalidInput(
            f"tensor '{name}' of datatype {dtype.name} must hold JSON {_KIND_NAMES[want]}, "
            f"got {_KIND_NAMES.get(kind, 'other values')}"
        )
    if arr.dtype == target:
        return arr
    if want in "iu":
        check_range(int(arr.min()), int(arr.max()), dtype, name)
    return narrow(arr, dtype, name)


def check_range(low: int, high: int, dtype: DType, name: str) -> None:
    """``low`` and ``high``: the smallest and largest value of the tensor ``name``."""
    info = np.iinfo(dtype.numpy)
    if low < info.min:
        raise range_error(low, dtype, name)
    if high > info.max:
        raise range_error(high, dtype, name)


def range_error(value: int | float, dtype: DType, name: str) -> InvalidInput:
    """The 400 for an integer ``value`` beyond an integer ``dtype``, as every protocol says it."""
    info = np.iinfo(dtype.numpy)
    return InvalidInput(
        f"tensor '{name}' holds {value}, which is outside the {dtype.name} range "
        f"[{info.min}, {info.max}]"
    )


def beyond_integers(item: object, dtype: DType) -> bool:
    """Is ``item`` a float that stands for an integer beyond ``dtype``? A JSON integer literal
    past 64 bits is read as a float (orjson), so a float at or past the 64-bit edges is one."""
    if type(item) is not float or not item.is_integer():
        return False
    info = np.iinfo(dtype.numpy)
    return not info.min <= item <= info.max or item <= -(2.0**63) or item >= 2.0**64


def narrow(wide: np.ndarray, dtype: DType, name: str) -> np.ndarray:
    """The numbers of ``wide`` (an array: float64 as JSON numbers are read, or any wider type)
    as ``dtype``; a 400 naming the tensor for a finite value that would become an infinity there
    (``1e39`` as FP32, ``70000`` as FP16), instead of the silent infinity a cast makes. The one
    range check of floats that every protocol's readers share. NaN and infinities sent as such
    pass, and so do values that round to the largest finite one (``3.4028235e38``, FP32's maximum
    as clients print it) and values that underflow towards zero.

    It costs nothing: the cast itself raises the floating-point overflow flag in exactly that
    case (IEEE 754: a finite result too large for the format), and errstate turns the flag into
    an exception. Casts to integers raise no flag (``check_range`` covers them); ml_dtypes' casts
    to BF16 may not raise it, so BF16 is compared value by value."""
    try:
        if _RAISE_ON_OVERFLOW is None:
            with np.errstate(over="raise"):
                narrowed = wide.astype(dtype.numpy, copy=False)
        else:  # what np.errstate(over="raise") sets, set without building an errstate
            state, raising = _RAISE_ON_OVERFLOW
            token = state.set(raising)
            try:
                narrowed = wide.astype(dtype.numpy, copy=False)
            finally:
                state.reset(token)
    except FloatingPointError:
        raise InvalidInput(_beyond_message(wide, dtype, name)) from None
    if dtype.numpy.kind == "V" and _lost(wide, narrowed).any():  # BF16 (ml_dtypes)
        raise InvalidInput(_beyond_message(wide, dtype, name))
    return narrowed


def _overflow_raises() -> tuple[Any, Any] | None:
    """numpy's floating-point error state (a context variable) and the value of it that raises on
    overflow, as ``np.errstate(over="raise")`` sets them; None where numpy keeps them elsewhere.

    Building and entering an errstate per request cost most of ``narrow``'s time; setting the
    variable directly costs a third of it [cost: errstate]."""
    try:
        config = importlib.import_module("numpy._core._ufunc_config")
        umath = importlib.import_module("numpy._core._multiarray_umath")
        return config._extobj_contextvar, umath._make_extobj(over="raise")
    except (ImportError, AttributeError, TypeError):
        return None


_RAISE_ON_OVERFLOW = _overflow_raises()


def _lost(wide: np.ndarray, narrowed: np.ndarray) -> np.ndarray:
    """Where a finite value became an infinity."""
    return np.isinf(narrowed.astype(np.float32)) & np.isfinite(wide.astype(np.float64))


def _beyond_message(wide: np.ndarray, dtype: DType, name: str) -> str:
    flat = wide.reshape(-1)
    with np.errstate(over="ignore"):
        lost = _lost(flat, flat.astype(dtype.numpy))
    value = flat[int(np.argmax(lost))]  # printed in its own precision: 1e+39, 70000
    top = float(ml_dtypes.finfo(dtype.numpy).max)  # type: ignore[no-untyped-call]  # BF16 too
    return (
        f"tensor '{name}' holds {value!s}, which is outside the {dtype.name} range "
        f"(largest finite magnitude {top:.8g})"
    )
