"""core/dtypes.py: the one datatype table (V2 names, numpy dtypes, wire sizes)."""

from __future__ import annotations

import re

import ml_dtypes
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


# -- exact_cast: a model's output as its declared datatype, with no value changed -------------

KEPT = [
    (np.array([1, 2], np.int32), "INT64"),  # wider
    (np.array([1, -2], np.int64), "INT32"),  # narrower, the values fit
    (np.array([0, 255], np.int64), "UINT8"),
    (np.array([1.0, -3.0]), "INT16"),  # integral floats
    (np.array([0, 1], np.int64), "BOOL"),
    (np.array([True, False]), "FP32"),
    (np.array([2**24], np.int64), "FP32"),  # exactly representable
    (np.array([0.5, np.nan, -np.inf]), "FP32"),  # NaN and infinities are values too
    (np.array([1.5], np.float32), "BF16"),
    (np.array([1.5], ml_dtypes.bfloat16), "FP64"),
    (np.zeros((0, 3), np.int64), "INT8"),
]

REFUSED = [
    (np.array([1 + 2j], np.complex64), "FP32", TypeError, "imaginary part"),
    (np.array([1 + 0j], np.complex128), "FP64", TypeError, "complex"),
    (np.array([1.0, None]), "FP32", TypeError, "Python objects"),
    (np.array(["1"]), "INT32", TypeError, "text"),
    (np.array([b"1"]), "INT32", TypeError, "bytes"),
    (np.array([2**31], np.int64), "INT32", ValueError, "2147483648"),
    (np.array([-1], np.int64), "UINT64", ValueError, "(-1)"),
    (np.array([2**63], np.uint64), "INT64", ValueError, "9223372036854775808"),
    (np.array([2**53 + 1], np.int64), "FP64", ValueError, "9007199254740993"),
    (np.array([1.5]), "INT64", ValueError, "1.5"),
    (np.array([np.nan]), "INT32", ValueError, "nan"),
    (np.array([2], np.int64), "BOOL", ValueError, "(2)"),
    (np.array([1e39]), "FP32", ValueError, "beyond FP32's range"),
    (np.array([0.1, 3.4e38, 3.5e38]), "FP32", ValueError, "beyond FP32's range"),
    (np.array([70000.0], np.float32), "FP16", ValueError, "beyond FP16's range"),
]


@pytest.mark.parametrize(("arr", "name"), KEPT, ids=lambda v: getattr(v, "dtype", v))
def test_exact_cast_keeps_every_value(arr: np.ndarray, name: str) -> None:
    out = dtypes.exact_cast(arr, DTYPES[name])
    assert out.dtype == DTYPES[name].numpy
    assert out.shape == arr.shape
    np.testing.assert_allclose(out.astype(np.float64), arr.astype(np.float64), rtol=1e-7)


@pytest.mark.parametrize(("arr", "name", "error", "why"), REFUSED, ids=lambda v: str(v)[:20])
def test_exact_cast_refuses_a_loss(arr: np.ndarray, name: str, error: type, why: str) -> None:
    with pytest.raises(error, match=re.escape(why)):
        dtypes.exact_cast(arr, DTYPES[name])


def test_exact_cast_rounds_a_float_to_the_declared_precision() -> None:
    """What a model computes in float64 for an FP32 output is its nearest float32 (as numpy
    writes it): precision is what the declaration chooses, not a lost value."""
    out = dtypes.exact_cast(np.array([0.1, 1 / 3]), DTYPES["FP32"])
    assert out.tolist() == np.array([0.1, 1 / 3], np.float32).tolist()
