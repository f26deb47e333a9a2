"""One JSON value <-> one tensor: the fact sheet's leaf-type (§4.1), shape (§4.2), b64 and
output-encoding (§5) rules, with TF's error texts. Every case runs both through the vectorized
path and through the element-by-element walk, which must agree."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest

from rosettaserve.core.errors import InvalidInput, ServingError, Unsupported
from rosettaserve.protocols.tfserving.tensors import (
    b64decode,
    is_b64,
    leaves_array,
    to_array,
    to_json,
    walk,
)

BOTH = pytest.mark.parametrize("fast", [True, False])


def has_bools(value: Any) -> bool:
    """What the body loader tells the converter: are there true/false tokens at all?"""
    text = json.dumps(value)
    return "true" in text or "false" in text


def convert(value: Any, datatype: str, fast: bool = True) -> np.ndarray:
    return to_array(value, datatype, maybe_bools=has_bools(value) or not fast)


def error(value: Any, datatype: str, fast: bool = True) -> ServingError:
    with pytest.raises(ServingError) as err:
        convert(value, datatype, fast)
    return err.value


def type_error(text: str, json_type: str, tf_type: str) -> str:
    return f"JSON Value: {text} Type: {json_type} is not of expected type: {tf_type}"


# -- leaf types -------------------------------------------------------------------------------

ACCEPTED = [
    ("FP32", [1, 2.5, -3e2], np.float32, [1.0, 2.5, -300.0]),
    ("FP32", [1435774380], np.float32, [1435774336.0]),  # narrowed double -> float
    ("FP32", [1e-50, -1e-50], np.float32, [0.0, 0.0]),  # underflow: no data lost to speak of
    ("FP32", [3.4028235e38], np.float32, [np.finfo(np.float32).max]),
    ("FP64", [1, 0.1], np.float64, [1.0, 0.1]),
    ("INT32", [-(2**31), 2**31 - 1], np.int32, [-(2**31), 2**31 - 1]),
    ("INT8", [-128, 127], np.int8, [-128, 127]),
    ("UINT8", [0, 255], np.uint8, [0, 255]),
    ("INT16", [-32768, 32767], np.int16, [-32768, 32767]),
    ("INT64", [2**63 - 1, -(2**63)], np.int64, [2**63 - 1, -(2**63)]),
    ("UINT32", [0, 2**32 - 1], np.uint32, [0, 2**32 - 1]),
    ("UINT64", [0, 2**64 - 1], np.uint64, [0, 2**64 - 1]),
    ("BOOL", [True, False], np.bool_, [True, False]),
    ("BYTES", ["héllo", {"b64": "aGk="}], object, ["héllo".encode(), b"hi"]),
]


@BOTH
@pytest.mark.parametrize(("datatype", "value", "dtype", "expected"), ACCEPTED)
def test_accepted_leaves(
    datatype: str, value: list[Any], dtype: Any, expected: list[Any], fast: bool
) -> None:
    arr = convert(value, datatype, fast)
    assert arr.dtype == np.dtype(dtype)
    assert arr.tolist() == expected


REJECTED = [  # datatype, value, (the value as TF prints it, its JSON type, TF's type name)
    ("FP32", [1, True], ("true", "True", "float")),
    ("FP32", [1, "1"], ('"1"', "String", "float")),
    ("FP32", [1, None], ("null", "Null", "float")),
    ("FP32", [{"b64": "AAAA"}], ('{"b64":"AAAA"}', "Object", "float")),  # b64 into a float input
    ("FP64", [False], ("false", "False", "double")),
    ("INT32", [1, 1.0], ("1.0", "Number", "int32")),  # ints reject 1.0
    ("INT32", [2**31], (str(2**31), "Number", "int32")),
    ("INT8", [2**31], (str(2**31), "Number", "int8")),
    ("UINT8", [1.5], ("1.5", "Number", "uint8")),
    ("INT64", [2**63], (str(2**63), "Number", "int64")),
    ("INT64", [True], ("true", "True", "int64")),
    ("UINT32", [-1], ("-1", "Number", "uint32")),
    ("UINT32", [2**32], (str(2**32), "Number", "uint32")),
    ("UINT64", [-1], ("-1", "Number", "uint64")),
    ("BOOL", [True, 0], ("0", "Number", "bool")),  # bools reject 0/1
    ("BOOL", [1], ("1", "Number", "bool")),
    ("BOOL", ["true"], ('"true"', "String", "bool")),
    ("BYTES", ["a", 1], ("1", "Number", "string")),
    ("BYTES", [["a"], [None]], ("null", "Null", "string")),
]


@BOTH
@pytest.mark.parametrize(("datatype", "value", "expected"), REJECTED)
def test_rejected_leaves_give_tf_type_errors(
    datatype: str, value: list[Any], expected: tuple[str, str, str], fast: bool
) -> None:
    exc = error(value, datatype, fast)
    assert isinstance(exc, InvalidInput)
    assert exc.message == type_error(*expected) + beyond(datatype, value[-1])


def beyond(datatype: str, value: Any) -> str:
    """What follows TF's text for an integer outside an integer datatype's range."""
    if datatype not in RANGES or type(value) is not int:
        return ""
    low, high = RANGES[datatype]
    if low <= value <= high:
        return ""
    return f" (tensor '' holds {value}, which is outside the {datatype} range [{low}, {high}])"


RANGES = {"INT8": (-128, 127), "UINT8": (0, 255), "INT16": (-32768, 32767)}
RANGES |= {"INT32": (-(2**31), 2**31 - 1), "INT64": (-(2**63), 2**63 - 1)}
RANGES |= {"UINT32": (0, 2**32 - 1), "UINT64": (0, 2**64 - 1)}


def test_narrow_ints_out_of_range_are_refused_not_wrapped_as_tf_does() -> None:
    """TF reads INT8/UINT8/INT16 as int32 and narrows them unchecked (300 as INT8 is 44): a 400
    here, naming the tensor, the value and the range, in rows and columns alike."""
    for datatype, value in [("INT8", 300), ("INT8", -129), ("UINT8", 256), ("INT16", 70000)]:
        for fast in (True, False):
            exc = error([1, value], datatype, fast)
            assert isinstance(exc, InvalidInput)
            assert exc.message.endswith(beyond(datatype, value)), exc.message
        with pytest.raises(InvalidInput, match=f"tensor 'x' holds {value}, which is outside"):
            to_array([[value]], datatype, maybe_bools=False, name="x")


def test_numbers_hiding_booleans_are_caught_when_the_body_has_true_or_false() -> None:
    assert error([1, True], "FP32").message == type_error("true", "True", "float")
    assert to_array([1, True], "FP32", maybe_bools=False).tolist() == [1, 1]  # why the flag
    assert error([[1, 0], [True, 2]], "INT32").message == type_error("true", "True", "int32")


@pytest.mark.parametrize(("datatype", "tf_type"), [("FP16", "half"), ("BF16", "bfloat16")])
def test_datatypes_tf_cannot_read_from_json_are_501(datatype: str, tf_type: str) -> None:
    exc = error([1.5], datatype)
    assert isinstance(exc, Unsupported)
    assert exc.http_status == 501
    assert exc.message == f"Conversion of JSON Value: 1.5 to type: {tf_type}"
    assert convert([], datatype).shape == (0,)  # no leaf, no error


def test_uint16_is_not_read_from_json_either() -> None:
    assert error([1], "UINT16").message == "Conversion of JSON Value: 1 to type: uint16"


def test_nan_and_infinity_are_floats_only() -> None:
    assert np.isnan(convert([float("nan")], "FP32")[0])
    assert convert([float("inf")], "FP64")[0] == np.inf
    assert error([float("nan")], "INT32").message == type_error("NaN", "Number", "int32")


FP32_BEYOND = "tensor 'x' holds {}, which is outside the FP32 range (largest finite magnitude"


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        ([1e39], "1e+39"),
        ([1.0, -1e39], "-1e+39"),
        ([[0.5], [3.5e38]], "3.5e+38"),
        ([10**39], "1e+39"),
    ],
)
def test_fp32_beyond_its_range_is_refused_naming_the_input(value: Any, shown: str) -> None:
    """TF narrows such a number to an infinity without a word; here it is a 400, by the vectorized
    conversion and by the walk alike (NaN and Infinity, sent as tokens, stay values)."""
    with pytest.raises(InvalidInput) as fast:
        to_array(value, "FP32", name="x")
    leaves, shape = walk(value, "FP32")
    with pytest.raises(InvalidInput) as walked:
        leaves_array(leaves, shape, "FP32", "x")
    assert fast.value.message == walked.value.message
    assert fast.value.message.startswith(FP32_BEYOND.format(shown))
    assert to_array([1e39], "FP64", name="x").tolist() == [1e39]


LEVEL = "found at incorrect level: "


# -- shapes -----------------------------------------------------------------------------------


@BOTH
@pytest.mark.parametrize(
    ("value", "shape"),
    [
        ([[1, 2], [3, 4], [5, 6]], (3, 2)),
        (5, ()),
        ([], (0,)),
        ([[], []], (2, 0)),
        ([[[1]], [[2]]], (2, 1, 1)),
    ],
)
def test_shape_comes_from_the_first_element_at_each_level(
    value: Any, shape: tuple[int, ...], fast: bool
) -> None:
    assert convert(value, "FP32", fast).shape == shape


@BOTH
@pytest.mark.parametrize(
    ("value", "message"),
    [
        ([[1, 2], 3], f"JSON Value: 3 {LEVEL}2 in the JSON DOM. Expected at level: 2"),
        ([1, [2]], "Encountered list at unexpected level: 1 expected < 1"),
        ([[1, 2], [3]], "Encountered list at unexpected size: 1 at level: 1 expected size: 2"),
        ([[1], [2, 3]], "Encountered list at unexpected size: 2 at level: 1 expected size: 1"),
        ([[[1]], [2]], f"JSON Value: 2 {LEVEL}3 in the JSON DOM. Expected at level: 3"),
        ([[], [1]], "Encountered list at unexpected size: 1 at level: 1 expected size: 0"),
    ],
)  # fmt: skip
def test_irregular_lists_give_tf_shape_errors(value: Any, message: str, fast: bool) -> None:
    assert error(value, "FP32", fast).message == message


def test_the_first_error_in_document_order_wins() -> None:
    value = [[1, "x"], [2]]
    assert error(value, "FP32").message == type_error('"x"', "String", "float")


# -- base64 -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "raw"),
    [
        ("aGVsbG8=", b"hello"),
        ("aGVsbG8", b"hello"),  # padding optional
        ("aGVs\nbG8 =", b"hello"),  # whitespace ignored
        ("aGVsbG8.", b"hello"),  # '.' as a pad
        ("", b""),
        ("+/+/", b"\xfb\xff\xbf"),
    ],
)
def test_b64_decoding_is_lenient_like_tf(text: str, raw: bytes) -> None:
    assert b64decode(text) == raw
    assert convert({"b64": text}, "BYTES").tolist() == raw


@pytest.mark.parametrize("text", ["-_-_", "a", "aGVsbG8=x", "!!!!"])
def test_bad_b64_is_an_error(text: str) -> None:
    assert error([{"b64": text}], "BYTES").message == "Unable to base64 decode"


def test_a_b64_object_has_exactly_one_string_member() -> None:
    assert is_b64({"b64": "AA=="})
    assert not is_b64({"b64": "AA==", "x": 1})
    assert not is_b64({"b64": 5})
    message = error([{"b64": "AA==", "x": 1}], "BYTES").message
    assert message == 'JSON Value: {"b64":"AA==","x":1} not formatted correctly for base64 data'


# -- output encoding --------------------------------------------------------------------------


def strings(*items: bytes) -> np.ndarray:
    out = np.empty(len(items), dtype=object)
    out[:] = list(items)
    return out


def test_bytes_outputs_are_b64_only_when_named_bytes() -> None:
    data = strings(b"hi", b"\xff")
    assert to_json(data, "BYTES", "image_bytes") == b'[{"b64":"aGk="},{"b64":"/w=="}]'
    assert to_json(data, "BYTES", "label") == '["hi","\ufffd"]'.encode()
    assert to_json(strings(b"a")[0:1].reshape(()), "BYTES", "x_bytes") == b'{"b64":"YQ=="}'


def test_numbers_and_booleans_are_written_exactly() -> None:
    assert to_json(np.array([[1, 2]], dtype=np.int8), "INT8", "o") == b"[[1,2]]"
    assert to_json(np.array(2**64 - 1, dtype=np.uint64), "UINT64", "o") == b"18446744073709551615"
    assert to_json(np.array([True, False]), "BOOL", "o") == b"[true,false]"
    assert to_json(np.array([0.1, 2], dtype=np.float32), "FP32", "o") == b"[0.1,2.0]"


@pytest.mark.parametrize(("datatype", "name"), [("FP16", "half"), ("BF16", "bfloat16")])
def test_outputs_tf_cannot_write_are_400(datatype: str, name: str) -> None:
    import ml_dtypes

    dtype = np.float16 if datatype == "FP16" else ml_dtypes.bfloat16
    with pytest.raises(InvalidInput, match=f"^Failed to write JSON value for tensor type: {name}$"):
        to_json(np.ones(2, dtype=dtype), datatype, "o")
    assert to_json(np.ones(0, dtype=dtype), datatype, "o") == b"[]"
