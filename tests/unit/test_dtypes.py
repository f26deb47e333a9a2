"""core/dtypes.py: the one datatype table (V2 names, numpy dtypes, wire sizes)."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from rosettaserve.core import dtypes
from rosettaserve.core.dtypes import DTYPES
from rosettaserve.core.errors import InvalidInput

EXPECTED = {
    "BOOL": (np.bool_, 1),
    "UINT8": (np.uint8, 1),
    "UINT16": (np.uint16, 2),
    "UINT32": (np.uint32, 4),
    "UINT64": (np.uint64, 8),
    "INT8": (np.int8, 1),
    "INT16": (np.int16, 2),
    "INT32": (np.int32, 4),
    "INT64": (np.int64, 8),
    "FP16": (np.float16, 2),
    "FP32": (np.float32, 4),
    "FP64": (np.float64, 8),
    "BF16": (ml_dtypes.bfloat16, 2),
    "BYTES": (np.object_, 0),
}


def test_table_holds_exactly_the_v2_datatypes() -> None:
    assert list(DTYPES) == list(EXPECTED)  # the protocol's order, nothing more


@pytest.mark.parametrize("name", list(EXPECTED))
def test_entry(name: str) -> None:
    np_type, size = EXPECTED[name]
    entry = dtypes.lookup(name)
    assert entry is DTYPES[name]
    assert entry.name == name
    assert entry.numpy == np.dtype(np_type)
    assert entry.itemsize == size
    assert entry.is_bytes == (name == "BYTES")
    if not entry.is_bytes:
        assert entry.numpy.itemsize == size  # the wire size is the packed numpy size
    assert entry.json_ok == (name not in ("FP16", "BF16"))


@pytest.mark.parametrize("name", [n for n in EXPECTED if n != "BYTES"])
def test_from_numpy_inverts_the_table(name: str) -> None:
    assert dtypes.from_numpy(np.dtype(EXPECTED[name][0])) is DTYPES[name]


@pytest.mark.parametrize("dtype", [np.dtype(object), np.dtype("S3"), np.dtype("U2")], ids=str)
def test_from_numpy_text_is_bytes(dtype: np.dtype) -> None:
    assert dtypes.from_numpy(dtype) is DTYPES["BYTES"]


@pytest.mark.parametrize("dtype", [np.complex64, np.dtype("M8[s]"), np.float128], ids=str)
def test_from_numpy_unmapped(dtype: object) -> None:
    with pytest.raises(TypeError, match="no V2 datatype"):
        dtypes.from_numpy(np.dtype(dtype))  # type: ignore[call-overload]


@pytest.mark.parametrize(
    "name", ["fp32", "FLOAT32", "TYPE_FP32", "", " FP32", "STRING", 11, None, ["FP32"]], ids=repr
)
def test_lookup_unknown(name: object) -> None:
    with pytest.raises(InvalidInput) as info:
        dtypes.lookup(name)  # type: ignore[arg-type]
    assert info.value.http_status == 400
    assert repr(name) in info.value.message
    for valid in EXPECTED:  # the message lists what would have worked
        assert valid in info.value.message
