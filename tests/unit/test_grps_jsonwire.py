"""grps HTTP bodies: content types, protobuf's JSON mapping, ndarray, and reply bodies."""

from __future__ import annotations

import base64
import json
from typing import Any

import numpy as np
import pytest

from rosettaserve.core.errors import InvalidInput
from rosettaserve.core.types import InferenceResponse, Tensor
from rosettaserve.protocols.grps import jsonwire
from rosettaserve.protocols.grps.pb import grps_pb2 as pb

JSON = "application/json"


def body(doc: Any) -> bytes:
    return json.dumps(doc).encode()


def reply(*outputs: Tensor) -> InferenceResponse:
    return InferenceResponse(model_name="m", model_version="1", outputs=list(outputs))


@pytest.mark.parametrize(
    "content_type",
    ["application/json", "application/json; charset=utf-8", "Application/JSON;charset=UTF-8"],
)
def test_json_with_or_without_parameters(content_type: str) -> None:
    payload = jsonwire.parse_predict(content_type, body({"str_data": "hi", "model": "m-2"}))
    assert (payload.form, payload.model, payload.tensors[0].data.tolist()) == (
        "str_data",
        "m-2",
        [b"hi"],
    )


def test_octet_stream_is_bin_data_whatever_it_holds() -> None:
    raw = b'{"str_data": "not parsed"}\x00\xff'
    payload = jsonwire.parse_predict("application/octet-stream", raw)
    assert payload.form == "bin_data"
    assert payload.tensors[0].data.tolist() == [raw]


@pytest.mark.parametrize("content_type", [None, "text/plain", "application/x-www-form-urlencoded"])
def test_other_content_types_are_refused(content_type: str | None) -> None:
    with pytest.raises(InvalidInput, match="send application/json"):
        jsonwire.parse_predict(content_type, body({"str_data": "x"}))


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (b"", "the request body is empty"),
        (b"  \n", "the request body is empty"),
        (b'{"str_data": ', "not valid JSON"),
        (b'["str_data"]', "must be a JSON object"),
        (body({"bin_data": base64.b64encode(b"x").decode()}), "bin_data cannot travel in JSON"),
        (body({"model": "m"}), "carries no data"),
        (body({"unknown": 1}), "carries no data"),
        (body({"str_data": "a", "gmap": {"s_s": {"k": "v"}}}), 'multiple "data_oneof"'),
        (body({"str_data": 5}), "not a valid GrpsMessage"),
        (body({"ndarray": [1], "str_data": "a"}), "ndarray cannot come with another"),
        (body({"gmap": {"s_b": {"k": "!!not base64!!"}}}), "s_b['k'] is not base64"),
        (body({"gtensors": {"tensors": [{"shape": [-1]}]}}), "not a valid GrpsMessage"),
    ],
)
def test_malformed_bodies_are_400s_that_say_why(raw: bytes, message: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        jsonwire.parse_predict(JSON, raw)
    assert message in caught.value.message


def test_unknown_enum_names_are_refused_though_unknown_keys_are_ignored() -> None:
    tensor = {"name": "a", "dtype": "DT_FLOAT128", "shape": [1], "flat_float32": [1]}
    with pytest.raises(InvalidInput, match="tensor 'a' has an unknown dtype 'DT_FLOAT128'"):
        jsonwire.parse_predict(JSON, body({"gtensors": {"tensors": [tensor]}}))


@pytest.mark.parametrize("dtype", ["DT_INT32", 4, "4"])
def test_enums_by_name_or_number(dtype: Any) -> None:
    tensor = {"name": "a", "dtype": dtype, "shape": [2], "flat_int32": [1, 2], "flat_double": [1]}
    payload = jsonwire.parse_predict(JSON, body({"gtensors": {"tensors": [tensor]}, "x": {}}))
    (parsed,) = payload.tensors
    assert (parsed.datatype, parsed.data.tolist()) == ("INT32", [1, 2])


def test_int64_accepts_json_strings_and_s_b_accepts_both_base64_alphabets() -> None:
    raw = bytes([0xFB, 0xFF, 0x00])
    doc = {
        "gmap": {
            "s_i64": {"big": str(2**62)},
            "s_b": {"std": base64.b64encode(raw).decode(), "url": "-_8A"},
        }
    }
    tensors = {t.name: t.data.tolist() for t in jsonwire.parse_predict(JSON, body(doc)).tensors}
    assert tensors == {"std": [raw], "url": [raw], "big": [2**62]}


@pytest.mark.parametrize(
    ("value", "shape"),
    [
        ([[[1, 2, 3], [4, 5, 6]], [[7, 8, 9], [10, 11, 12]]], (2, 2, 3)),
        ([1.5, 2], (2,)),
        (3, ()),
    ],
)
def test_ndarray_is_one_unnamed_fp32_tensor_of_inferred_shape(
    value: Any, shape: tuple[int, ...]
) -> None:
    payload = jsonwire.parse_predict(JSON, body({"ndarray": value, "model": "m"}))
    (tensor,) = payload.tensors
    assert (payload.form, payload.model, tensor.name) == ("ndarray", "m", "")
    assert (tensor.datatype, tensor.shape, tensor.data.dtype) == ("FP32", shape, np.float32)
    assert tensor.data.tolist() == value


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ([[1, 2], [3]], "ragged"),
        ([[1, 2], 3], "ragged"),
        ([], "empty dimension"),
        ([[1], []], "ragged"),
        ([1, "2"], "must hold JSON numbers"),
        ([True, 1], "must hold JSON numbers"),
        ({"a": 1}, "must hold JSON numbers"),
    ],
)
def test_bad_ndarrays_are_400s(value: Any, message: str) -> None:
    with pytest.raises(InvalidInput, match=message):
        jsonwire.parse_predict(JSON, body({"ndarray": value}))


def test_metadata_bodies_may_be_empty_but_not_ndarray() -> None:
    assert jsonwire.parse_message(None, b"", allow_empty=True) == pb.GrpsMessage()
    assert jsonwire.parse_message(JSON, body({"str_data": "m"})).str_data == "m"
    with pytest.raises(InvalidInput, match="ndarray is accepted by infer/predict only"):
        jsonwire.parse_message(JSON, body({"ndarray": [1]}))


def test_replies_use_proto_field_names_enum_names_and_int64_strings() -> None:
    out = Tensor("o", "INT64", (2,), np.array([1, 2**53 + 1], dtype=np.int64))
    raw, content_type = jsonwire.encode_any(reply(out), "gtensors")
    assert content_type == JSON
    assert json.loads(raw) == {
        "status": {"code": 200, "msg": "OK", "status": "SUCCESS"},
        "model": "m-1",
        "gtensors": {
            "tensors": [
                {
                    "name": "o",
                    "dtype": "DT_INT64",
                    "shape": [2],
                    "flat_int64": ["1", str(2**53 + 1)],
                }
            ]
        },
    }


def test_a_bin_data_answer_is_the_raw_bytes() -> None:
    out = Tensor("o", "BYTES", (1,), np.array([b"\x00\xff"], dtype=object))
    assert jsonwire.encode_any(reply(out), "bin_data") == (b"\x00\xff", "application/octet-stream")


def test_return_ndarray_nests_the_single_fp32_output() -> None:
    data = np.arange(6, dtype=np.float32).reshape(3, 2).T  # not C-contiguous
    doc = json.loads(jsonwire.encode_ndarray(reply(Tensor("o", "FP32", (2, 3), data))))
    assert doc["ndarray"] == data.tolist()
    assert doc["status"]["status"] == "SUCCESS"
    scalar = json.loads(jsonwire.encode_ndarray(reply(Tensor("o", "FP32", (), np.float32(0.1)))))
    assert scalar["ndarray"] == 0.1


@pytest.mark.parametrize(
    "outputs",
    [
        [Tensor("o", "FP64", (1,), np.array([1.0]))],
        [Tensor("o", "FP32", (1,), np.ones(1, np.float32))] * 2,
        [],
    ],
)
def test_return_ndarray_needs_a_single_fp32_output(outputs: list[Tensor]) -> None:
    with pytest.raises(InvalidInput, match="return-ndarray needs a single FP32 output"):
        jsonwire.encode_ndarray(reply(*outputs))


def test_stream_lines_are_one_compact_json_message_each() -> None:
    line = jsonwire.stream_line(pb.GrpsMessage(str_data="a\nb"))
    assert line.endswith(b"\n")
    assert line.count(b"\n") == 1
    assert json.loads(line) == {"str_data": "a\nb"}
