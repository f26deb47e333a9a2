"""core/codec.py: every datatype round-trips through the raw and JSON forms; bad input is a 400."""

from __future__ import annotations

import struct
import tracemalloc
import warnings
from typing import Any

import ml_dtypes
import numpy as np
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from numpy.testing import assert_array_equal

from rosettaserve.core import codec
from rosettaserve.core.codec import (
    SMALL_LIST,
    check_shape,
    element_count,
    from_json,
    from_raw,
    from_values,
    narrow,
    raw_bytes,
    to_raw,
)
from rosettaserve.core.dtypes import DTYPES, DType
from rosettaserve.core.errors import InvalidInput
from tests.v2data import DATATYPES, JSON_DATATYPES

INTS = ["UINT8", "UINT16", "UINT32", "UINT64", "INT8", "INT16", "INT32", "INT64"]
FLOATS = ["FP16", "FP32", "FP64", "BF16"]
NUMERIC_JSON = [name for name in JSON_DATATYPES if name not in ("BOOL", "BYTES")]
BYTES_ITEMS = [b"", b"a\x00b", b"\x00", b"\x00\x00\x00\x00", "é€".encode(), b"\xff\xfe", b"x" * 300]


def sample(name: str) -> np.ndarray:
    """Six values of a datatype, covering its extremes (and, for floats, the special values)."""
    dtype = DTYPES[name].numpy
    if name == "BOOL":
        return np.array([True, False, True, True, False, False])
    if name == "BYTES":
        out = np.empty(6, dtype=object)
        out[:] = BYTES_ITEMS[:6]
        return out
    if name in INTS:
        info = np.iinfo(dtype)
        return np.array([info.min, info.max, 0, 1, info.max - 1, info.min + 1], dtype=dtype)
    info = ml_dtypes.finfo(dtype)
    return np.array(
        [info.min, info.max, info.smallest_subnormal, -0.0, np.inf, np.nan], dtype=dtype
    )


def json_sample(name: str) -> np.ndarray:
    """Six values a JSON document can carry exactly (no inf / nan, BYTES as UTF-8 text)."""
    if name == "BYTES":
        out = np.empty(6, dtype=object)
        out[:] = [b"", b"a\x00b", b"\x00", "é€".encode(), b"plain", b"x" * 300]
        return out
    arr = sample(name)
    if name in ("FP32", "FP64"):
        arr[4:] = [1.5, -2.25]
    return arr


def as_json(arr: np.ndarray) -> Any:
    """``arr`` as a server would see it: its nested list, through JSON text and back."""
    value = arr.tolist()
    if arr.dtype == object:
        value = np.vectorize(lambda b: b.decode(), otypes=[object])(arr).tolist()
    return orjson.loads(orjson.dumps(value))


def assert_decoded(out: np.ndarray, expected: np.ndarray, dtype: DType) -> None:
    assert isinstance(out, np.ndarray)
    assert out.dtype == dtype.numpy, (out.dtype, dtype.numpy)
    assert out.shape == expected.shape
    if dtype.is_bytes:
        assert all(type(item) is bytes for item in out.reshape(-1))
    if dtype.name == "BF16":  # numpy's NaN-aware comparison does not know bfloat16: compare bits
        assert_array_equal(out.view(np.uint16), expected.view(np.uint16), strict=True)
    else:
        assert_array_equal(out, expected, strict=not dtype.is_bytes)
    if dtype.name in FLOATS:  # -0.0 == 0.0, so compare the sign bits too
        assert_array_equal(np.signbit(out), np.signbit(expected))


def raw_round_trip(arr: np.ndarray, dtype: DType) -> tuple[bytes, np.ndarray]:
    raw = bytes(to_raw(arr, dtype))
    return raw, from_raw(raw, dtype, arr.shape, "t")


SHAPES = [(6,), (2, 3), (3, 1, 2), (1, 6)]


# -- raw (binary) form ------------------------------------------------------------------------


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("name", DATATYPES)
def test_raw_round_trip_every_datatype(name: str, shape: tuple[int, ...]) -> None:
    dtype = DTYPES[name]
    arr = sample(name).reshape(shape)
    raw, out = raw_round_trip(arr, dtype)
    if dtype.is_bytes:
        assert len(raw) == sum(4 + len(item) for item in arr.reshape(-1))
    else:
        assert len(raw) == arr.size * dtype.itemsize == arr.nbytes
        assert raw == arr.astype(arr.dtype.newbyteorder("<")).tobytes()  # little-endian
    assert_decoded(out, arr, dtype)


@pytest.mark.parametrize("name", DATATYPES)
def test_raw_round_trip_scalar(name: str) -> None:
    dtype = DTYPES[name]
    arr = sample(name)[1:2].reshape(())
    raw, out = raw_round_trip(arr, dtype)
    assert out.shape == ()
    assert len(raw) == (4 + len(arr.item()) if dtype.is_bytes else dtype.itemsize)
    assert_decoded(out, arr, dtype)


@pytest.mark.parametrize("shape", [(0,), (2, 0), (0, 3), (4, 0, 2)], ids=str)
def test_raw_round_trip_empty(shape: tuple[int, ...]) -> None:
    failures = {}
    for name in DATATYPES:  # one test per shape, naming every datatype that fails it
        dtype = DTYPES[name]
        arr = np.empty(shape, dtype=dtype.numpy)
        try:
            raw, out = raw_round_trip(arr, dtype)
            assert raw == b""
            assert_decoded(out, arr, dtype)
        except Exception as exc:  # collected and reported below
            failures[name] = f"{type(exc).__name__}: {exc}"
    assert not failures, failures


WIRE = [
    ("BOOL", np.array([True, False]), b"\x01\x00"),
    ("UINT8", np.array([1, 255], dtype=np.uint8), b"\x01\xff"),
    ("UINT16", np.array([258], dtype=">u2"), b"\x02\x01"),  # big-endian in, little out
    ("UINT32", np.array([1], dtype=np.uint32), b"\x01\x00\x00\x00"),
    ("UINT64", np.array([2**64 - 2], dtype=np.uint64), b"\xfe" + b"\xff" * 7),
    ("INT8", np.arange(6, dtype=np.int8).reshape(2, 3).T, bytes([0, 3, 1, 4, 2, 5])),
    ("INT16", np.array([-2], dtype=np.int16), b"\xfe\xff"),
    ("INT32", np.array([1, 256], dtype=">i4"), b"\x01\x00\x00\x00\x00\x01\x00\x00"),
    ("INT64", np.array([-(2**63)], dtype=np.int64), b"\x00" * 7 + b"\x80"),
    ("FP16", np.array([1.0], dtype=np.float16), b"\x00\x3c"),
    ("FP32", np.array([1.0], dtype=np.float32), b"\x00\x00\x80\x3f"),
    ("FP64", np.array([-2.0]), struct.pack("<d", -2.0)),
    ("BF16", np.array([1.0, -2.0], dtype=ml_dtypes.bfloat16), b"\x80\x3f\x00\xc0"),
]


@pytest.mark.parametrize(("name", "arr", "wire"), WIRE, ids=[w[0] for w in WIRE])
def test_raw_wire_format_is_little_endian_row_major(
    name: str, arr: np.ndarray, wire: bytes
) -> None:
    dtype = DTYPES[name]
    assert bytes(to_raw(arr, dtype)) == wire
    assert raw_bytes(arr, dtype) == wire  # the protobuf form: one bytes object
    out = from_raw(wire, dtype, arr.shape, "t")
    assert_decoded(out, arr.astype(dtype.numpy), dtype)


def test_wire_table_covers_every_fixed_size_datatype() -> None:
    assert sorted(w[0] for w in WIRE) == sorted(n for n in DATATYPES if n != "BYTES")


def test_raw_bytes_wire_format_with_nuls_and_empty_strings() -> None:
    arr = np.array([b"ab", b"", b"\x00", "é"], dtype=object)
    raw = bytes(to_raw(arr, DTYPES["BYTES"]))
    assert raw_bytes(arr, DTYPES["BYTES"]) == raw
    assert raw == (
        b"\x02\x00\x00\x00ab" + b"\x00\x00\x00\x00" + b"\x01\x00\x00\x00\x00"
        b"\x02\x00\x00\x00\xc3\xa9"
    )
    out = from_raw(raw, DTYPES["BYTES"], (2, 2), "t")
    assert out.dtype == object
    assert out.tolist() == [[b"ab", b""], [b"\x00", "é".encode()]]


def test_raw_bytes_only_empty_strings() -> None:
    raw = b"\x00\x00\x00\x00" * 3
    out = from_raw(raw, DTYPES["BYTES"], (3,), "t")
    assert out.tolist() == [b"", b"", b""]


@pytest.mark.parametrize("kind", [bytes, bytearray, memoryview])
def test_from_raw_accepts_any_buffer(kind: type) -> None:
    arr = np.array([[1.5, -2.0], [3.25, 0.0]], dtype=np.float32)
    out = from_raw(kind(arr.tobytes()), DTYPES["FP32"], (2, 2), "t")
    assert_decoded(out, arr, DTYPES["FP32"])


def test_raw_bool_bytes_decode() -> None:
    out = from_raw(b"\x01\x00\x01", DTYPES["BOOL"], (3,), "t")
    assert_decoded(out, np.array([True, False, True]), DTYPES["BOOL"])


# -- raw rejections ---------------------------------------------------------------------------


@pytest.mark.parametrize("delta", [-1, 1, -4])
@pytest.mark.parametrize("name", [n for n in DATATYPES if n != "BYTES"])
def test_raw_size_mismatch(name: str, delta: int) -> None:
    dtype = DTYPES[name]
    raw = np.zeros((2, 3), dtype=dtype.numpy).tobytes()
    assert len(raw) == 6 * dtype.itemsize
    bad = raw[:delta] if delta < 0 else raw + b"\x00" * delta
    with pytest.raises(InvalidInput, match=r"'INPUT0'.*needs \d+ bytes"):
        from_raw(bad, dtype, (2, 3), "INPUT0")


def test_raw_size_mismatch_message() -> None:
    with pytest.raises(InvalidInput) as info:
        from_raw(b"\x00" * 20, DTYPES["FP32"], (2, 3), "INPUT0")
    message = info.value.message
    assert "INPUT0" in message
    assert "24" in message
    assert "20" in message
    assert info.value.http_status == 400


def test_raw_empty_shape_with_bytes() -> None:
    with pytest.raises(InvalidInput, match="INPUT0"):
        from_raw(b"\x00\x00\x00\x00", DTYPES["INT32"], (0,), "INPUT0")
    with pytest.raises(InvalidInput, match="INPUT0"):
        from_raw(b"\x00\x00\x00\x00", DTYPES["BYTES"], (2, 0), "INPUT0")


@pytest.mark.parametrize(
    ("raw", "shape"),
    [
        (struct.pack("<I", 5) + b"ab", (1,)),  # length runs past the end
        (struct.pack("<I", 2**32 - 1) + b"ab", (1,)),  # the largest length
        (struct.pack("<I", 1) + b"a" + struct.pack("<I", 9) + b"bc", (2,)),  # second element
        (struct.pack("<I", 1) + b"a" + b"\x01\x00", (2,)),  # ends inside a length prefix
        (b"\x01\x00", (1,)),  # shorter than one length prefix
        (b"", (1,)),  # nothing at all
    ],
    ids=["past_end", "max_length", "second_past_end", "cut_prefix", "short_prefix", "empty"],
)
def test_raw_bytes_length_prefix_past_end(raw: bytes, shape: tuple[int, ...]) -> None:
    with pytest.raises(InvalidInput, match="INPUT0"):
        from_raw(raw, DTYPES["BYTES"], shape, "INPUT0")


@pytest.mark.parametrize(
    ("raw", "shape"),
    [
        (struct.pack("<I", 1) + b"ab", (1,)),
        (struct.pack("<I", 0) + struct.pack("<I", 0), (1,)),
        (struct.pack("<I", 0), (0,)),
        (struct.pack("<I", 2) + b"ab" + b"\x00", (1, 1)),
    ],
    ids=["inside_element", "extra_element", "empty_shape", "one_byte"],
)
def test_raw_bytes_trailing_bytes(raw: bytes, shape: tuple[int, ...]) -> None:
    with pytest.raises(InvalidInput, match="INPUT0"):
        from_raw(raw, DTYPES["BYTES"], shape, "INPUT0")


@pytest.mark.parametrize(
    "shape", [(2**40,), (2**20, 2**20), (2**62, 2**62), (2**31, 2**31, 2**31)], ids=str
)
@pytest.mark.parametrize("name", ["BYTES", "FP32", "UINT8", "FP64"])
def test_raw_huge_shape_fails_before_allocating(name: str, shape: tuple[int, ...]) -> None:
    tracemalloc.start()
    try:
        with pytest.raises(InvalidInput, match="INPUT0"):
            from_raw(b"\x00" * 8, DTYPES[name], shape, "INPUT0")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20, f"allocated {peak} bytes before rejecting"


def test_raw_bytes_count_bounded_by_buffer() -> None:
    # 3 elements need at least 12 bytes of length prefixes; 11 bytes cannot hold them.
    with pytest.raises(InvalidInput, match=r"INPUT0.*3 elements"):
        from_raw(b"\x00" * 11, DTYPES["BYTES"], (3,), "INPUT0")


# -- JSON form --------------------------------------------------------------------------------


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("name", JSON_DATATYPES)
def test_json_nested_and_flat(name: str, shape: tuple[int, ...]) -> None:
    dtype = DTYPES[name]
    arr = json_sample(name).reshape(shape)
    nested = from_json(as_json(arr), dtype, shape, "t")
    flat = from_json(as_json(arr.reshape(-1)), dtype, shape, "t")
    assert_decoded(nested, arr, dtype)
    assert_decoded(flat, arr, dtype)


@pytest.mark.parametrize("name", JSON_DATATYPES)
def test_json_scalar_shape(name: str) -> None:
    dtype = DTYPES[name]
    arr = json_sample(name)[1:2]
    for data in (as_json(arr)[0], as_json(arr)):  # a bare value or a one-element list
        out = from_json(data, dtype, (), "t")
        assert_decoded(out, arr.reshape(()), dtype)


@pytest.mark.parametrize(
    ("data", "shape"), [([], (0,)), ([], (2, 0)), ([[], []], (2, 0)), ([], (0, 3))], ids=str
)
@pytest.mark.parametrize("name", JSON_DATATYPES)
def test_json_empty(name: str, data: Any, shape: tuple[int, ...]) -> None:
    dtype = DTYPES[name]
    out = from_json(data, dtype, shape, "t")
    assert_decoded(out, np.empty(shape, dtype=dtype.numpy), dtype)


@pytest.mark.parametrize(
    ("name", "values"),
    [
        ("INT64", [-(2**63), 2**63 - 1]),
        ("INT64", [2**63 - 1, -(2**63), 0, -1]),
        ("UINT64", [0, 2**64 - 1]),
        ("UINT64", [2**64 - 1]),
        ("UINT64", [2**63, 1]),
        ("INT32", [-(2**31), 2**31 - 1]),
        ("UINT32", [0, 2**32 - 1]),
    ],
    ids=lambda v: str(v) if isinstance(v, str) else "_".join(map(str, v)),
)
def test_json_integer_extremes_are_exact(name: str, values: list[int]) -> None:
    dtype = DTYPES[name]
    data = orjson.loads(orjson.dumps(values))  # as the server parses them
    out = from_json(data, dtype, (len(values),), "t")
    assert out.dtype == dtype.numpy
    assert [int(v) for v in out] == values  # exact, no trip through float64


def test_json_bytes_with_nuls_and_empty_strings() -> None:
    data = orjson.loads('["", "a\\u0000b", "\\u0000", "é"]')
    out = from_json(data, DTYPES["BYTES"], (2, 2), "t")
    assert out.dtype == object
    assert out.tolist() == [[b"", b"a\x00b"], [b"\x00", "é".encode()]]


def test_json_bool() -> None:
    out = from_json([[True, False], [False, True]], DTYPES["BOOL"], (2, 2), "t")
    assert_decoded(out, np.array([[True, False], [False, True]]), DTYPES["BOOL"])


def test_json_ints_into_float_types() -> None:
    out = from_json([1, 2, -3], DTYPES["FP32"], (3,), "t")
    assert_decoded(out, np.array([1, 2, -3], dtype=np.float32), DTYPES["FP32"])
    out = from_json([1, 2.5], DTYPES["FP64"], (2,), "t")
    assert_decoded(out, np.array([1.0, 2.5]), DTYPES["FP64"])


SHORT_AND_LONG = [
    ("FP32", [1.5, -2, 0.0, -0.0]),
    ("FP32", [3.5e38, -3.5e38, 1e300]),  # beyond FP32: refused, naming the tensor
    ("FP32", [3.4028235e38, -3.4028235e38]),  # FP32's largest, as printed: a hair above it
    ("FP32", [2**70, 1]),  # a big integer is a number
    ("FP32", [10**400]),  # beyond float64 too
    ("FP64", [1.7976931348623157e308, 2**1030]),
    ("INT8", [-128, 127]),
    ("INT8", [128]),
    ("UINT8", [-1]),
    ("UINT64", [2**64 - 1, 0]),
    ("INT64", [2**63]),
    ("INT32", [1, 2.0]),
    ("INT32", [True, 1]),
    ("FP32", [1.0, False]),
    ("BOOL", [True, False]),
    ("BOOL", [1, True]),
    ("FP32", [1.0, "2"]),
    ("FP32", [1.0, None]),
]


def _decoded(data: list[Any], name: str) -> tuple[str, Any]:
    try:
        out = from_json(data, DTYPES[name], (len(data),), "t")
    except InvalidInput as exc:
        return "error", exc.message
    return str(out.dtype), out.tolist()


@pytest.mark.parametrize(("name", "values"), SHORT_AND_LONG, ids=str)
def test_json_short_lists_decode_as_long_ones_do(name: str, values: list[Any]) -> None:
    """Lists up to SMALL_LIST elements take a shorter path; it must agree with the general one
    (values and dtype, or the same error), and warn of nothing."""
    long = values * (SMALL_LIST // len(values) + 1)
    assert len(values) <= SMALL_LIST < len(long)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        short_result, long_result = _decoded(values, name), _decoded(long, name)
    assert short_result[0] == long_result[0]
    if short_result[0] == "error":
        assert short_result[1] == long_result[1]
    else:
        assert short_result[1] == long_result[1][: len(values)]


# -- JSON rejections --------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["FP16", "BF16"])
def test_json_half_precision_rejected(name: str) -> None:
    with pytest.raises(InvalidInput, match=rf"{name}.*INPUT0.*binary"):
        from_json([1.0], DTYPES[name], (1,), "INPUT0")


@pytest.mark.parametrize(
    ("data", "shape"),
    [
        ([1, 2, 3], (2, 2)),
        ([1, 2, 3, 4, 5], (2, 2)),
        ([[1, 2], [3, 4], [5, 6]], (2, 2)),
        ([[1, 2]], (2, 2)),
        ([], (1,)),
        ([1], (0,)),
        ([1, 2], ()),
        ([1, 2, 3, 4], (2**62, 2**62)),
        ([1, 2, 3, 4], (10**12, 4)),
    ],
    ids=[
        "fewer",
        "more",
        "nested_more",
        "nested_fewer",
        "none",
        "into_empty",
        "scalar",
        "overflow",
        "huge",
    ],
)
@pytest.mark.parametrize("name", ["INT32", "FP32", "BOOL", "BYTES"])
def test_json_wrong_element_count(name: str, data: list[Any], shape: tuple[int, ...]) -> None:
    dtype = DTYPES[name]
    if name == "BOOL":
        data = [
            [bool(v % 2) for v in row] if isinstance(row, list) else bool(row % 2) for row in data
        ]
    elif name == "BYTES":
        data = [[str(v) for v in row] if isinstance(row, list) else str(row) for row in data]
    with pytest.raises(InvalidInput, match=r"INPUT0.*elements"):
        from_json(data, dtype, shape, "INPUT0")


@pytest.mark.parametrize(
    "data",
    [[[1, 2], [3]], [1, [2, 3]], [[1, 2], 3, 4], [[[1, 2]], [[3], [4]]]],
    ids=["short_row", "scalar_then_list", "list_then_scalars", "deep_ragged"],
)
@pytest.mark.parametrize("name", ["INT32", "FP32", "BOOL", "BYTES"])
def test_json_ragged_rejected(name: str, data: list[Any]) -> None:
    def convert(item: Any) -> Any:
        if isinstance(item, list):
            return [convert(i) for i in item]
        return {"BOOL": bool(item % 2), "BYTES": str(item)}.get(name, item)

    with pytest.raises(InvalidInput, match=r"INPUT0.*ragged"):
        from_json(convert(data), DTYPES[name], (3,), "INPUT0")


@pytest.mark.parametrize("value", [0.5, -2.5, 1e300])
@pytest.mark.parametrize("name", INTS)
def test_json_float_into_int_rejected(name: str, value: float) -> None:
    with pytest.raises(InvalidInput, match=rf"INPUT0.*{name}"):
        from_json([1, value], DTYPES[name], (2,), "INPUT0")


@pytest.mark.parametrize("data", [[0, 1], [1], [True, 0], [0.0, 1.0], ["true", "false"]])
def test_json_non_bool_into_bool_rejected(data: list[Any]) -> None:
    with pytest.raises(InvalidInput, match=r"INPUT0.*BOOL"):
        from_json(data, DTYPES["BOOL"], (len(data),), "INPUT0")


@pytest.mark.parametrize("data", [[True, False], [True, 1]])
@pytest.mark.parametrize("name", ["INT32", "FP32"])
def test_json_bool_into_number_rejected(name: str, data: list[Any]) -> None:
    with pytest.raises(InvalidInput, match=rf"INPUT0.*{name}"):
        from_json(data, DTYPES[name], (2,), "INPUT0")


def _out_of_range() -> list[tuple[str, int]]:
    cases = []
    for name in INTS:
        info = np.iinfo(DTYPES[name].numpy)
        cases += [(name, int(info.max) + 1), (name, int(info.min) - 1)]
    return cases


@pytest.mark.parametrize(("name", "value"), _out_of_range(), ids=str)
def test_json_out_of_range_int_rejected(name: str, value: int) -> None:
    with pytest.raises(InvalidInput, match=rf"INPUT0.*{name} range"):
        from_json([0, value], DTYPES[name], (2,), "INPUT0")


@pytest.mark.parametrize("data", [["1"], ["1.5", 2], [None], [{"a": 1}], [[1], "x"]])
@pytest.mark.parametrize("name", NUMERIC_JSON)
def test_json_non_numbers_rejected(name: str, data: list[Any]) -> None:
    with pytest.raises(InvalidInput, match="INPUT0"):
        from_json(data, DTYPES[name], (len(data),), "INPUT0")


@pytest.mark.parametrize("item", [1, 1.5, True, None, {"a": "b"}])
def test_json_non_strings_into_bytes_rejected(item: Any) -> None:
    with pytest.raises(InvalidInput, match=r"INPUT0.*string"):
        from_json(["ok", item], DTYPES["BYTES"], (2,), "INPUT0")
    with pytest.raises(InvalidInput, match=r"INPUT0.*string"):
        from_json([["ok"], [item]], DTYPES["BYTES"], (2, 1), "INPUT0")


def test_json_errors_are_400() -> None:
    with pytest.raises(InvalidInput) as info:
        from_json(["x"], DTYPES["FP32"], (1,), "INPUT0")
    assert info.value.http_status == 400


# -- shapes -----------------------------------------------------------------------------------


@pytest.mark.parametrize("shape", [[], [0], [2, 0], [1, 2, 3], (4,), [2**62]], ids=str)
def test_check_shape_valid(shape: Any) -> None:
    out = check_shape(shape, "t")
    assert out == tuple(shape)
    assert all(type(dim) is int for dim in out)


@pytest.mark.parametrize("shape", [[-1], [2, -1], [-(2**63)]], ids=str)
def test_check_shape_negative(shape: list[int]) -> None:
    with pytest.raises(InvalidInput, match=r"INPUT0.*negative"):
        check_shape(shape, "INPUT0")


@pytest.mark.parametrize("shape", [[1.0], [2, 1.5], ["2"], [True], [None], [[2]]], ids=repr)
def test_check_shape_non_int(shape: list[Any]) -> None:
    with pytest.raises(InvalidInput, match=r"INPUT0.*integers"):
        check_shape(shape, "INPUT0")


@pytest.mark.parametrize("shape", [3, "2,2", None, {"0": 2}], ids=repr)
def test_check_shape_not_a_list(shape: Any) -> None:
    with pytest.raises(InvalidInput, match="INPUT0"):
        check_shape(shape, "INPUT0")


def test_check_shape_too_many_dims() -> None:
    assert len(check_shape([1] * 64, "t")) == 64
    with pytest.raises(InvalidInput, match="INPUT0"):
        check_shape([1] * 65, "INPUT0")


def test_element_count() -> None:
    assert element_count(()) == 1
    assert element_count((0,)) == 0
    assert element_count((2, 0, 5)) == 0
    assert element_count((2, 3, 4)) == 24
    assert element_count((2**62, 2**62)) == 2**124  # exact, no int64 wrap-around


# -- float ranges: no value silently narrowed to an infinity ----------------------------------

FP32_MAX = float(np.finfo(np.float32).max)
FP32_HALFWAY = FP32_MAX + 2.0**103  # between FP32's largest and 2**128: rounds to infinity


@pytest.mark.parametrize(
    ("name", "values", "shown"),
    [
        ("FP32", [1e39], "1e+39"),
        ("FP32", [0.5, -1e39, 2.0], "-1e+39"),
        ("FP32", [FP32_HALFWAY], "3.4028235677973366e+38"),  # exactly halfway: to even, inf
        ("FP32", [np.nan, 1e300], "1e+300"),  # a NaN before it hides nothing
        ("FP16", [65520.0], "65520.0"),
        ("FP16", [1, 70000], "70000"),
        ("BF16", [3.4e38], "3.4e+38"),
    ],
)
def test_narrowing_beyond_the_range_is_a_400_naming_the_tensor(
    name: str, values: list[Any], shown: str
) -> None:
    dtype = DTYPES[name]
    with pytest.raises(InvalidInput) as err:
        narrow(np.array(values), dtype, "INPUT0")
    assert err.value.message.startswith(
        f"tensor 'INPUT0' holds {shown}, which is outside the {name} range"
    )


@pytest.mark.parametrize(
    ("name", "values", "expected"),
    [
        ("FP32", [3.4028235e38, -3.4028235e38], [FP32_MAX, -FP32_MAX]),  # its largest, as printed
        ("FP32", [np.nextafter(FP32_HALFWAY, 0)], [FP32_MAX]),
        ("FP32", [np.inf, -np.inf, 1.0], [np.inf, -np.inf, 1.0]),  # sent as such
        ("FP32", [1e-50, -1e-300], [0.0, -0.0]),  # underflow: fine
        ("FP16", [65519.0, -65519.0], [65504.0, -65504.0]),
        ("BF16", [3.38e38], [float(ml_dtypes.bfloat16(3.38e38))]),
        ("FP64", [1.7976931348623157e308], [1.7976931348623157e308]),
        ("INT8", [-128, 127], [-128, 127]),  # integers: check_range's part
    ],
)
def test_narrowing_within_the_range(name: str, values: list[Any], expected: list[float]) -> None:
    out = narrow(np.array(values), DTYPES[name], "INPUT0")
    assert out.dtype == DTYPES[name].numpy
    assert out.astype(np.float64).tolist() == expected


def test_narrowing_keeps_nan() -> None:
    out = narrow(np.array([np.nan, 1.0]), DTYPES["FP32"], "INPUT0")
    assert np.isnan(out[0])
    assert out[1] == 1.0


def test_narrowing_sets_numpys_error_state_directly_and_restores_it() -> None:
    """narrow raises on overflow through numpy's own error state, set without np.errstate (the
    installed numpy keeps it where codec looks), and leaves the caller's state as it was, after
    a refusal too: a model's overflow still warns as numpy's default says."""
    assert codec._RAISE_ON_OVERFLOW is not None
    before = np.geterr()
    narrow(np.array([1.0, 2.0]), DTYPES["FP32"], "x")
    with pytest.raises(InvalidInput):
        narrow(np.array([1e39]), DTYPES["FP32"], "x")
    assert np.geterr() == before
    with np.errstate(over="ignore"):  # a caller's own setting, kept around the call
        narrow(np.array([1.0]), DTYPES["FP32"], "x")
        assert np.geterr()["over"] == "ignore"
        with pytest.raises(InvalidInput):
            narrow(np.array([1e39]), DTYPES["FP32"], "x")
        assert np.geterr()["over"] == "ignore"


@pytest.mark.parametrize(
    "data",
    [[1e39, 1.0], [1.0] * 300 + [1e39], [[1.0], [1e39]], [10**39], [1.0, 10**39], [True, 1e39]],
    ids=["short", "long", "nested", "big_int", "big_int_among_floats", "bool_first"],
)
def test_json_data_beyond_fp32_is_refused(data: list[Any]) -> None:
    """Every path of from_json: the short list, numpy's conversion, Python objects."""
    count = len(data)
    with pytest.raises(InvalidInput, match=r"tensor 'INPUT0' (holds|of datatype)"):
        from_json(
            data, DTYPES["FP32"], (count, 1) if isinstance(data[0], list) else (count,), "INPUT0"
        )


def test_json_data_beyond_fp32_message() -> None:
    with pytest.raises(InvalidInput) as err:
        from_json([1.0, 2**130], DTYPES["FP32"], (2,), "INPUT0")
    assert err.value.message == (
        f"tensor 'INPUT0' holds {float(2**130)}, which is outside the FP32 range "
        "(largest finite magnitude 3.4028235e+38)"
    )


@pytest.mark.parametrize("carrier", ["float32", "float64"])
def test_typed_values_beyond_fp16_are_refused(carrier: str) -> None:
    """Protobuf float fields carrying FP16 data (grps's flat_float16)."""
    with pytest.raises(InvalidInput, match=r"tensor 'h' holds 70000.*FP16 range"):
        from_values([1.0, 70000.0], np.dtype(carrier), DTYPES["FP16"], (2,), "h")
    out = from_values([1.0, np.inf], np.dtype(carrier), DTYPES["FP16"], (2,), "h")
    assert out.tolist() == [1.0, np.inf]


@settings(max_examples=500, deadline=None)
@given(
    hnp.arrays(np.float64, st.integers(0, 40), elements={"allow_nan": True}),
    st.sampled_from(["FP16", "FP32", "BF16"]),
)
def test_narrowing_refuses_exactly_the_values_a_cast_turns_infinite(
    wide: np.ndarray, name: str
) -> None:
    dtype = DTYPES[name]
    with np.errstate(over="ignore"):
        cast = wide.astype(dtype.numpy)
    lost = np.isfinite(wide) & np.isinf(cast.astype(np.float64))
    if lost.any():
        with pytest.raises(InvalidInput, match=f"tensor 'x' holds .* outside the {name} range"):
            narrow(wide, dtype, "x")
    else:
        out = narrow(wide, dtype, "x")
        assert out.dtype == dtype.numpy
        np.testing.assert_array_equal(out.astype(np.float64), cast.astype(np.float64))
