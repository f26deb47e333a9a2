"""TensorFlow's TensorProto <-> numpy, with TensorFlow's rules. Pure functions.

Reading (``Tensor::FromProto``): ``tensor_content`` holds every element, little-endian and
row-major, and must be exactly the shape's size; otherwise the dtype's typed field holds them
(``float_val``, ``int_val`` for the narrow ints, ``half_val`` for the bit patterns of half and
bfloat16, ...): no values means zeros, fewer values than elements repeat the last one (so one
value fills the shape), more is an error. Narrow ints are cast as TensorFlow casts them (wrapping).

Writing (``Tensor::AsProtoTensorContent``, what TF Serving answers with): numeric and bool
tensors in ``tensor_content``, string tensors in ``string_val``.
"""

from __future__ import annotations

import math
import sys
from typing import Any, Final

import numpy as np

from rosettaserve.core import dtypes
from rosettaserve.core.codec import raw_bytes
from rosettaserve.core.errors import InvalidInput
from rosettaserve.protocols.tfserving import messages as pb

Part = bytes | memoryview  # of a serialized message: joined by the caller
_LITTLE: Final = sys.byteorder == "little"  # the wire's order is little-endian
# the most elements a tensor may have when its typed values are fewer (the last value, or zero,
# fills the rest: a few bytes on the wire could otherwise ask for any amount of memory)
MAX_FILLED: Final = 1 << 24
# the elements of a shape's nonzero dims: numpy counts its bytes in int64 even with a dim of 0
_MAX_SIZE: Final = (2**63 - 1) // 16
_ONE_BYTE: Final = [bytes((i,)) for i in range(0x80)]  # the varints of one byte, made once
SMALL_COPY: Final = 4096  # bytes of tensor_content written as a copy, not a view
# DataType enum value -> our V2 datatype name (the dtypes a served model can take)
FROM_DT: Final[dict[int, str]] = {
    pb.DT_FLOAT: "FP32",
    pb.DT_DOUBLE: "FP64",
    pb.DT_INT32: "INT32",
    pb.DT_UINT8: "UINT8",
    pb.DT_INT16: "INT16",
    pb.DT_INT8: "INT8",
    pb.DT_STRING: "BYTES",
    pb.DT_INT64: "INT64",
    pb.DT_BOOL: "BOOL",
    pb.DT_BFLOAT16: "BF16",
    pb.DT_UINT16: "UINT16",
    pb.DT_HALF: "FP16",
    pb.DT_UINT32: "UINT32",
    pb.DT_UINT64: "UINT64",
}
TO_DT: Final[dict[str, int]] = {name: dt for dt, name in FROM_DT.items()}
# what a TensorProto's writer writes most: its dtype field, and a dim of a size under 128
_DTYPE_FIELDS: Final = {name: bytes((0x08, dt)) for name, dt in TO_DT.items()}
_DIMS: Final = [b"\x12\x02\x08" + bytes((d,)) if d else b"\x12\x00" for d in range(0x80)]
# the typed field each dtype's values travel in, and the numpy type it reads as
_FIELDS: Final[dict[str, tuple[str, Any]]] = {
    "FP32": ("float_val", np.float32),
    "FP64": ("double_val", np.float64),
    "INT32": ("int_val", np.int32),
    "INT16": ("int_val", np.int32),
    "INT8": ("int_val", np.int32),
    "UINT8": ("int_val", np.int32),
    "UINT16": ("int_val", np.int32),
    "INT64": ("int64_val", np.int64),
    "UINT32": ("uint32_val", np.uint32),
    "UINT64": ("uint64_val", np.uint64),
    "BOOL": ("bool_val", np.bool_),
    "FP16": ("half_val", np.int32),
    "BF16": ("half_val", np.int32),
    "BYTES": ("string_val", None),
}


def typed_count(proto: Any) -> int:
    """How many values the proto's typed field holds (what reading it costs, element by
    element); 0 for a dtype we do not read or for ``tensor_content``."""
    name = FROM_DT.get(proto.dtype)
    return 0 if name is None else len(getattr(proto, _FIELDS[name][0]))


def datatype_of(proto: Any) -> str | None:
    return FROM_DT.get(proto.dtype)


def shape_of(proto: Any) -> tuple[int, ...] | None:
    """The tensor's shape, or None when it cannot be a tensor's (unknown rank or dims)."""
    shape = proto.tensor_shape
    if shape.unknown_rank:
        return None
    return checked_shape(tuple([d.size for d in shape.dim]))


def checked_shape(dims: tuple[int, ...]) -> tuple[int, ...] | None:
    """``dims``, or None when they cannot be a tensor's."""
    return dims if _elements(dims) >= 0 else None


def _elements(dims: tuple[int, ...]) -> int:
    """The elements of a tensor of ``dims``, or -1 when they cannot be a tensor's."""
    size = 1
    for dim in dims:  # a loop, not math.prod and min: compiled, a few instructions a dim
        if dim < 0:
            return -1
        size *= dim
    if size > _MAX_SIZE or (size == 0 and _nonzero_size(dims) > _MAX_SIZE):
        return -1  # past what TensorFlow (int64 elements) and numpy (int64 bytes) hold
    return size


def _nonzero_size(dims: tuple[int, ...]) -> int:
    return math.prod([d for d in dims if d])


def to_array(proto: Any, alias: str) -> tuple[str, np.ndarray]:
    """The proto's datatype and values; TF Serving's ``tensor parsing error`` when it holds none
    that TensorFlow would read."""
    datatype, shape = datatype_of(proto), shape_of(proto)
    if datatype is None or shape is None:
        raise parse_error(alias)
    count = math.prod(shape)
    content = proto.tensor_content
    if content and datatype != "BYTES":
        return datatype, _from_content(
            content, 0, len(content), datatype=datatype, shape=shape, count=count, alias=alias
        )
    field, reads_as = _FIELDS[datatype]
    values = getattr(proto, field)
    if len(values) > count or (len(values) < count and count > MAX_FILLED):
        raise parse_error(alias)
    if datatype == "BYTES":
        flat = np.empty(count, dtype=object)
        if count:
            given = list(values) or [b""]
            flat[: len(given)] = given
            flat[len(given) :] = given[-1]
        return datatype, flat.reshape(shape)
    target = dtypes.DTYPES[datatype].numpy
    if not values:
        return datatype, np.zeros(shape, dtype=target)
    read = np.array(values, dtype=reads_as)
    if datatype in ("FP16", "BF16"):  # int32 holding the 16 bits
        array = read.astype(np.uint16).view(target)
    else:
        array = read.astype(target, copy=False)
    if len(array) < count:
        array = np.concatenate([array, np.full(count - len(array), array[-1], dtype=target)])
    return datatype, array.reshape(shape)


def content_array(
    dtype: int, dims: tuple[int, ...], data: bytes, *, start: int, end: int, alias: str
) -> tuple[str, np.ndarray]:
    """``to_array`` of a tensor whose (non-empty) values are all in ``tensor_content``, read
    from the wire (``predict_wire``): its dtype, dims, and its content ``data[start:end]``."""
    datatype, count = FROM_DT.get(dtype), _elements(dims)
    if datatype is None or count < 0 or datatype == "BYTES":
        raise parse_error(alias)
    return datatype, _from_content(
        data, start, end, datatype=datatype, shape=dims, count=count, alias=alias
    )


def _from_content(
    data: bytes,
    start: int,
    end: int,
    *,
    datatype: str,
    shape: tuple[int, ...],
    count: int,
    alias: str,
) -> np.ndarray:
    """The array of ``data[start:end]``, made in place (one numpy call: no view of the bytes,
    no reshape)."""
    dt = dtypes.DTYPES[datatype]
    if end - start != count * dt.itemsize:
        raise parse_error(alias)
    if datatype == "BOOL":  # any nonzero byte is true, as a C++ bool copied from bytes reads
        bools: np.ndarray = np.ndarray(shape, np.uint8, data, start) != 0
        return bools
    array = np.ndarray(shape, dt.numpy, data, start)
    return array if _LITTLE else array.byteswap()


def parse_error(alias: str) -> InvalidInput:
    return InvalidInput(f"tensor parsing error: {alias}")


def _as_bytes(item: Any) -> bytes:
    if isinstance(item, bytes):
        return item
    return str(item).encode() if not isinstance(item, (bytearray, memoryview)) else bytes(item)


def wire_parts(data: np.ndarray, datatype: str) -> list[Part]:
    """``data`` as a serialized TensorProto, in parts, written as TF Serving answers:
    ``tensor_content``, or ``string_val`` for strings. Written by hand: a large tensor's values
    are copied once (into the reply), not into a message and again out of it."""
    dims: tuple[int, ...] = data.shape  # typed: compiled, each dim compared as a machine int
    shape = b"".join([_DIMS[d] if d < 0x80 else field(2, b"\x08" + varint(d)) for d in dims])
    if datatype == "BYTES":
        parts: list[Part] = [_DTYPE_FIELDS[datatype], field(2, shape)]
        parts.extend(field(8, _as_bytes(item)) for item in data.reshape(-1))
        return parts
    dt = dtypes.DTYPES[datatype]
    size = dt.itemsize
    for dim in dims:  # the bytes, without asking numpy (an attribute lookup)
        size *= dim
    content: Part
    if _LITTLE and size <= SMALL_COPY:
        content = raw_bytes(data, dt)  # a copy of a few bytes costs less than a view of them
    else:  # the values themselves, not a copy: the caller's b"".join copies them into the reply
        array = np.ascontiguousarray(data, dtype=dt.numpy)
        if not _LITTLE:
            array = array.byteswap()
        content = array.reshape(-1).view(np.uint8).data
    return [_DTYPE_FIELDS[datatype], field(2, shape), b"\x22" + varint(len(content)), content]


def field(number: int, payload: bytes) -> bytes:
    """A length-delimited field (a message, bytes or a string) with its tag."""
    return varint(number << 3 | 2) + varint(len(payload)) + payload


def varint(value: int) -> bytes:
    if value < 0x80:
        return _ONE_BYTE[value]
    out = bytearray()
    while value > 0x7F:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def make(data: np.ndarray, datatype: str) -> Any:
    """A new TensorProto holding ``data``, as ``wire_parts`` writes it."""
    return pb.TensorProto.FromString(b"".join(wire_parts(data, datatype)))
