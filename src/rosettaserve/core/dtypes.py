"""The ONE datatype table: V2 datatype names, numpy dtypes and element sizes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

import ml_dtypes
import numpy as np

from rosettaserve.core.errors import InvalidInput


@dataclass(frozen=True, slots=True)
class DType:
    name: str
    numpy: np.dtype
    itemsize: int  # bytes per element on the wire; 0 = variable (BYTES)
    json_ok: bool = True  # representable as plain JSON numbers/booleans/strings

    @property
    def is_bytes(self) -> bool:
        return self.itemsize == 0


def _dt(name: str, np_type: object, itemsize: int, json_ok: bool = True) -> DType:
    return DType(name, np.dtype(np_type), itemsize, json_ok)  # type: ignore[call-overload]


# Final: compiled, C statics, not a lookup in the module's dict each [cost: final-static]
DTYPES: Final[dict[str, DType]] = {
    d.name: d
    for d in (
        _dt("BOOL", np.bool_, 1),
        _dt("UINT8", np.uint8, 1),
        _dt("UINT16", np.uint16, 2),
        _dt("UINT32", np.uint32, 4),
        _dt("UINT64", np.uint64, 8),
        _dt("INT8", np.int8, 1),
        _dt("INT16", np.int16, 2),
        _dt("INT32", np.int32, 4),
        _dt("INT64", np.int64, 8),
        _dt("FP16", np.float16, 2, json_ok=False),
        _dt("FP32", np.float32, 4),
        _dt("FP64", np.float64, 8),
        _dt("BF16", ml_dtypes.bfloat16, 2, json_ok=False),
        _dt("BYTES", np.object_, 0),
    )
}

_BY_NUMPY: Final[dict[np.dtype, DType]] = {d.numpy: d for d in DTYPES.values() if not d.is_bytes}


def lookup(name: Any, tensor: str | None = None) -> DType:
    """The table entry for a V2 datatype name, or a 400 naming the tensor and the valid names.
    ``name`` is Any: it may come from a client's JSON as any value (compiled, a ``str``
    parameter would refuse it with a TypeError at the call, before the 400 here)."""
    try:
        return DTYPES[name]
    except (KeyError, TypeError):
        where = f" of tensor '{tensor}'" if tensor is not None else ""
        valid = ", ".join(DTYPES)
        raise InvalidInput(f"unknown datatype {name!r}{where}; expected one of {valid}") from None


def from_numpy(dtype: np.dtype) -> DType:
    """The V2 datatype of a numpy array's dtype (str/bytes/object arrays are BYTES)."""
    if dtype.kind in "OSU":
        return DTYPES["BYTES"]
    try:
        return _BY_NUMPY[dtype]
    except KeyError:
        raise TypeError(f"numpy dtype {dtype} has no V2 datatype") from None


# what a numpy dtype's values are, for a conversion: b(ool), i(nt), u(nsigned), f(loat)
_BF16: Final = np.dtype(ml_dtypes.bfloat16)
_NOT_NUMBERS: Final = {
    "c": "complex numbers (their imaginary part would be lost)",
    "O": "Python objects (None, or values of mixed types)",
    "U": "text",
    "S": "bytes",
    "M": "dates",
    "m": "time spans",
}


def _number_kind(dtype: np.dtype) -> str:
    kind: str = dtype.kind
    if kind in "biuf":
        return kind
    if dtype == _BF16:
        return "f"
    raise TypeError(f"holds {_NOT_NUMBERS.get(kind, f'numpy {dtype} values')}")


def exact_cast(arr: np.ndarray, dt: DType) -> np.ndarray:
    """``arr`` as datatype ``dt`` (a number type), with no value changed but a float's precision:
    wider types as numpy casts safely, integers into narrower or other integer or float types,
    and floats into integers, when every value comes back the same; floats into narrower floats
    when none overflows. Else a ValueError (the values) or TypeError (the type) saying why."""
    source, target = _number_kind(arr.dtype), _number_kind(dt.numpy)
    with np.errstate(all="ignore"):
        out = arr.astype(dt.numpy)
        if source == "f" and target == "f":
            if np.isinf(out).any() and np.count_nonzero(np.isinf(out)) > np.count_nonzero(
                np.isinf(arr)
            ):
                raise ValueError(f"holds {arr.dtype} values beyond {dt.name}'s range")
            return out
        if np.can_cast(arr.dtype, dt.numpy, "safe") and not (source in "iu" and target == "f"):
            return out
        if source in "iu" and target in "iu":  # (a cast that wraps around would come back)
            _check_range(arr, dt)
            return out
        changed = out.astype(arr.dtype) != arr
        if changed.any():
            example = arr[changed].flat[0]
            raise ValueError(f"holds {arr.dtype} values {dt.name} cannot hold exactly ({example})")
    return out


def _check_range(arr: np.ndarray, dt: DType) -> None:
    if not arr.size:
        return
    info = np.iinfo(dt.numpy)
    low, high = int(arr.min()), int(arr.max())
    if low < info.min or high > info.max:
        example = low if low < info.min else high
        raise ValueError(f"holds {arr.dtype} values {dt.name} cannot hold exactly ({example})")
