"""core/json_nonfinite.py: NaN, Infinity and -Infinity written as tokens and read back, and the
OIP REST and grps converters that use it; tritonclient's parser (rapidjson) and Python's json
module read what is written."""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np
import orjson
import pytest
import rapidjson
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from rosettaserve.core import json_nonfinite
from rosettaserve.core.errors import InvalidInput
from rosettaserve.core.types import InferenceResponse, Tensor
from rosettaserve.protocols.grps import jsonwire
from rosettaserve.protocols.oip import convert

SPECIAL = [math.nan, math.inf, -math.inf]
_NUMPY = orjson.OPT_SERIALIZE_NUMPY


def written(value: Any) -> bytes:
    return orjson.dumps(value, option=_NUMPY)


def assert_left_as_orjson_writes_it(arr: np.ndarray) -> None:
    """A finite array is left to orjson, or, a float32 one where json_floats (C) is built, is
    its text: the same bytes."""
    out = json_nonfinite.array(arr)
    if json_nonfinite.json_floats is not None and arr.dtype == np.float32:
        assert isinstance(out, orjson.Fragment)
        assert written(out) == written(arr)
    else:
        assert out is arr


@pytest.mark.parametrize(
    ("value", "text"), [(math.nan, "NaN"), (math.inf, "Infinity"), (-math.inf, "-Infinity")]
)
def test_tokens(value: float, text: str) -> None:
    assert json_nonfinite.token(value) == text


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.bool_])
@pytest.mark.parametrize("size", [0, 4, 1000])
def test_a_finite_array_is_left_to_orjson(dtype: type, size: int) -> None:
    assert_left_as_orjson_writes_it(np.arange(size).astype(dtype))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("size", [3, 8, 9, 5000])  # both sides of the small-array pass
def test_non_finite_values_are_written_as_tokens(dtype: type, size: int) -> None:
    values = np.linspace(-1.5, 1.5, size).astype(dtype)
    where = np.random.default_rng(size).choice(size, 3, replace=False)
    values[where] = SPECIAL
    text = written(json_nonfinite.array(values))
    for parse in (json.loads, rapidjson.loads):
        back = np.array(parse(text), dtype=dtype)
        np.testing.assert_array_equal(back, values)  # NaN equals NaN here
    assert b"null" not in text
    assert text.count(b"NaN") == 1
    assert text.count(b"-Infinity") == 1


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_large_finite_values_are_no_false_alarm(dtype: type) -> None:
    """Large values are no infinities: they are written as they are."""
    assert_left_as_orjson_writes_it(np.full(100, np.finfo(dtype).max / 2, dtype=dtype))


def test_nested_arrays_keep_their_nesting() -> None:
    values = np.array([[1.0, math.nan], [-math.inf, 2.5]], dtype=np.float32)
    assert written(json_nonfinite.array(values)) == b"[[1.0,NaN],[-Infinity,2.5]]"
    transposed = values.T  # not C-contiguous
    assert written(json_nonfinite.array(transposed)) == b"[[1.0,-Infinity],[NaN,2.5]]"


def test_every_value_non_finite() -> None:
    values = np.full(10_000, math.inf, dtype=np.float32)
    values[::2] = math.nan
    text = written(json_nonfinite.array(values))
    assert text == b"[" + b",".join([b"NaN", b"Infinity"] * 5000) + b"]"


def test_loads_reads_the_tokens_and_orjson_reads_the_rest() -> None:
    assert json_nonfinite.loads(b'{"a": [1.5, 2]}') == {"a": [1.5, 2]}
    doc = json_nonfinite.loads(bytearray(b'{"a": [NaN, Infinity, -Infinity, 1]}'))
    assert math.isnan(doc["a"][0])
    assert doc["a"][1:] == [math.inf, -math.inf, 1]
    assert json_nonfinite.loads(memoryview(b'["NaN"]')) == ["NaN"]


@pytest.mark.parametrize(
    "numbers",
    [b"1, -2, 0.5, 1e-400", str(2**64 - 1).encode(), str(-(2**63)).encode(), b"9" * 30],
)
def test_loads_reads_numbers_as_orjson_does_beside_the_tokens(numbers: bytes) -> None:
    """The same values, and the same Python types, with or without a token in the text."""
    plain = orjson.loads(b"[" + numbers + b"]")
    with_token = json_nonfinite.loads(b"[" + numbers + b", NaN]")
    assert with_token[:-1] == plain
    assert [type(v) for v in with_token[:-1]] == [type(v) for v in plain]


@pytest.mark.parametrize(
    "text",
    [
        b'{"a": [NaN',  # malformed even so
        b'{"a": [Inf]}',  # not a token of JSON's readers (TF Serving's reader takes it)
        b'{"a": [-NaN]}',
        b'{"a": [NaN, 1e400]}',  # a finite literal too large for a double is no infinity
        b'{"a": NaN, "b": "\\ud800"}',  # a lone surrogate, which orjson refuses
        b'{"a": NaN, "b": "\xff"}',  # not UTF-8
        b'{"a": NaN, "b": ' + b"[" * 5000 + b"]" * 5000 + b"}",  # deeper than Python recurses
    ],
)
def test_loads_refuses_with_orjsons_error(text: bytes) -> None:
    with pytest.raises(orjson.JSONDecodeError):
        json_nonfinite.loads(text)


# -- OIP REST ---------------------------------------------------------------------------------


def oip_body(data: str, datatype: str = "FP32") -> bytes:
    return b'{"inputs":[{"name":"INPUT0","datatype":"%s","shape":[4],"data":%s}]}' % (
        datatype.encode(),
        data.encode(),
    )


@pytest.mark.parametrize("datatype", ["FP32", "FP64"])
def test_oip_reads_the_tokens_tritonclient_sends(datatype: str) -> None:
    body = oip_body("[NaN, Infinity, -Infinity, 0.5]", datatype)
    data = convert.parse_infer(body, None, "m", "1").inputs[0].data
    assert np.isnan(data[0])
    assert data[1:].tolist() == [math.inf, -math.inf, 0.5]


def test_oip_writes_the_tokens_and_they_read_back() -> None:
    request = convert.parse_infer(oip_body("[1, 2, 3, 4]"), None, "m", "1")
    values = np.array([[math.nan, 1.0, math.inf, -math.inf]], dtype=np.float32)
    outputs = [
        Tensor("OUTPUT0", "FP32", (1, 4), values),
        Tensor("OUTPUT1", "INT32", (2,), np.array([1, 2], dtype=np.int32)),
    ]
    header, blobs, length = convert.encode_infer(InferenceResponse("m", "1", outputs), request)
    assert (blobs, length) == ([], None)
    assert b'"data":[NaN,1.0,Infinity,-Infinity]' in header
    back = rapidjson.loads(header)["outputs"][0]["data"]
    np.testing.assert_array_equal(np.array(back, dtype=np.float32), values.ravel())


def test_oip_refuses_fp32_beyond_its_range_naming_the_input() -> None:
    with pytest.raises(InvalidInput) as err:
        convert.parse_infer(oip_body("[1, 1e39, 2, 3]"), None, "m", "1")
    assert err.value.message.startswith("tensor 'INPUT0' holds 1e+39, which is outside the FP32")
    data = convert.parse_infer(oip_body("[1, 1e39, 2, 3]", "FP64"), None, "m", "1").inputs[0].data
    assert data[1] == 1e39


# -- grps -------------------------------------------------------------------------------------


def grps_predict(doc: Any) -> Any:
    body = doc if isinstance(doc, bytes) else orjson.dumps(doc)
    return jsonwire.parse_predict("application/json", body)


def gtensor(name: str, dtype: str, field: str, values: list[Any]) -> dict[str, Any]:
    shape = [len(values)]
    return {
        "gtensors": {"tensors": [{"name": name, "dtype": dtype, "shape": shape, field: values}]}
    }


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        (gtensor("x", "DT_FLOAT32", "flat_float32", [1.0, 1e39]), "tensor 'x' holds 1e+39"),
        (gtensor("", "DT_FLOAT32", "flat_float32", [-1e39]), "tensor '#0' holds -1e+39"),
        (gtensor("h", "DT_FLOAT16", "flat_float16", [70000]), "tensor 'h' holds 70000"),
        ({"gmap": {"s_f": {"a": 1.0, "b": 1e39}}}, "tensor 'b' holds 1e+39"),
        ({"ndarray": [[1.0], [1e39]]}, "tensor 'ndarray' holds 1e+39"),
    ],
)
def test_grps_refuses_floats_beyond_their_range_naming_the_tensor(doc: Any, message: str) -> None:
    with pytest.raises(InvalidInput) as err:
        grps_predict(doc)
    assert err.value.message.startswith(message)


def test_grps_reads_fp32s_largest_value_as_it_is_printed() -> None:
    """Protobuf's own reader refuses 3.4028235e+38 (a hair above FP32's largest value), which
    protobuf itself writes for it."""
    top = float(np.finfo(np.float32).max)
    for doc in (
        gtensor("x", "DT_FLOAT32", "flat_float32", [3.4028235e38, -3.4028235e38]),
        {"gmap": {"s_f": {"x": 3.4028235e38}}},
    ):
        data = grps_predict(doc).tensors[0].data
        assert abs(data).tolist() == [top] * data.size


def test_grps_numbers_among_quoted_tokens_are_checked_too() -> None:
    mixed = gtensor("x", "DT_FLOAT32", "flat_float32", ["NaN", 3.4028235e38, "Infinity"])
    data = grps_predict(mixed).tensors[0].data
    assert np.isnan(data[0])
    assert data[1:].tolist() == [float(np.finfo(np.float32).max), math.inf]
    with pytest.raises(InvalidInput, match="tensor 'x' holds -1e"):
        grps_predict(gtensor("x", "DT_FLOAT32", "flat_float32", ["NaN", -1e39]))


def test_grps_quoted_tokens_in_messages_and_bare_ones_in_ndarray() -> None:
    quoted = grps_predict(gtensor("x", "DT_FLOAT32", "flat_float32", ["NaN", "-Infinity"]))
    assert np.isnan(quoted.tensors[0].data[0])
    assert quoted.tensors[0].data[1] == -math.inf
    bare = grps_predict(b'{"ndarray": [[NaN, Infinity, -Infinity]]}').tensors[0].data
    assert bare.shape == (1, 3)
    assert np.isnan(bare[0, 0])
    assert bare[0, 1:].tolist() == [math.inf, -math.inf]


def ndarray_reply(values: np.ndarray) -> bytes:
    tensor = Tensor("y", "FP32", values.shape, values)
    return jsonwire.encode_ndarray(InferenceResponse("m", "1", [tensor]))


def test_grps_ndarray_answers_carry_the_tokens() -> None:
    values = np.array([[math.nan, 2.0], [math.inf, -math.inf]], dtype=np.float32)
    assert b'"ndarray":[[NaN,2.0],[Infinity,-Infinity]]' in ndarray_reply(values)
    for value, text in ((math.nan, b"NaN"), (-math.inf, b"-Infinity"), (1.5, b"1.5")):
        scalar = np.array(value, dtype=np.float32)
        assert ndarray_reply(scalar).endswith(b'"ndarray":' + text + b"}")


def test_grps_message_answers_quote_the_tokens() -> None:
    values = np.array([math.nan, math.inf], dtype=np.float32)
    response = InferenceResponse("m", "1", [Tensor("y", "FP32", (2,), values)])
    body, _ = jsonwire.encode_any(response, "gtensors")
    assert orjson.loads(body)["gtensors"]["tensors"][0]["flat_float32"] == ["NaN", "Infinity"]


@settings(max_examples=300, deadline=None)
@given(
    hnp.arrays(
        st.sampled_from([np.float32, np.float64]),
        hnp.array_shapes(min_dims=1, max_dims=3, min_side=0, max_side=12),
        elements={"allow_nan": True, "allow_infinity": True},
    )
)
def test_any_float_array_reads_back_from_its_json(values: np.ndarray) -> None:
    text = written(json_nonfinite.array(values))
    for parse in (json.loads, rapidjson.loads):
        back = np.array(parse(text), dtype=values.dtype).reshape(values.shape)
        np.testing.assert_array_equal(back, values)
