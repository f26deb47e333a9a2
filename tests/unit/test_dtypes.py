"""core/dtypes.py: the one datatype table (V2 names, numpy dtypes, wire sizes)."""

from __future__ import annotations

import numpy as np
import pytest

from rosettaserve.core import dtypes
from rosettaserve.core.dtypes import DTYPES
from rosettaserve.core.errors import InvalidInput
from tests.v2data import V2

EXPECTED = V2  # the tests' own table: name -> (numpy type, wire size)


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
