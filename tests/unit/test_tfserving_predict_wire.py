"""Predict's request read from the wire (protocols/tfserving/predict_wire.py) is what protobuf's
parse reads, and whatever the reader does not take is left to protobuf."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from rosettaserve.core.errors import InvalidInput
from rosettaserve.core.types import TensorSpec
from rosettaserve.protocols.tfserving import grpc_convert as conv
from rosettaserve.protocols.tfserving import messages as pb
from rosettaserve.protocols.tfserving import predict_wire, tensorproto
from rosettaserve.protocols.tfserving.signatures import Signature

X = TensorSpec("x", "FP32", (-1, -1))
W = TensorSpec("w", "INT64", (-1,))
SIGNATURE = Signature("serving_default", "predict", {"x": X, "w": W}, {"y": X})


def request(**spec: Any) -> Any:
    req = pb.PredictRequest(model_spec={"name": "m", **spec})
    req.inputs["x"].CopyFrom(tensorproto.make(np.arange(6, dtype=np.float32).reshape(2, 3), "FP32"))
    req.inputs["w"].CopyFrom(tensorproto.make(np.array([-1, 2**40], dtype=np.int64), "INT64"))
    return req


def same_reading(data: bytes) -> predict_wire.Predict:
    """The reader's Predict, checked against protobuf's reading of the same bytes."""
    read = predict_wire.read(data)
    assert read is not None
    parsed = predict_wire.from_message(pb.PredictRequest.FromString(data))
    assert (read.target, read.signature_name, read.output_filter) == (
        parsed.target,
        parsed.signature_name,
        parsed.output_filter,
    )
    ours, theirs = (conv.predict_inputs(p, SIGNATURE) for p in (read, parsed))
    for alias in SIGNATURE.inputs:
        assert ours[alias].dtype == theirs[alias].dtype
        assert ours[alias].tolist() == theirs[alias].tolist()
    return read


@pytest.mark.parametrize(
    "spec",
    [{}, {"version": {"value": 7}}, {"version": {}}, {"version_label": "canary"}],
)
def test_the_reader_reads_what_protobuf_reads(spec: dict[str, Any]) -> None:
    req = request(signature_name="serving_default", **spec)
    req.output_filter.extend(["y", "y"])
    same_reading(req.SerializeToString())


def test_a_repeated_key_keeps_the_last_value_and_version_number_is_skipped() -> None:
    req = request()
    req.inputs["x"].version_number = 3
    first = pb.PredictRequest(inputs={"x": tensorproto.make(np.zeros((1, 1), np.float32), "FP32")})
    read = same_reading(first.SerializeToString() + req.SerializeToString())
    assert conv.predict_inputs(read, SIGNATURE)["x"].shape == (2, 3)


def test_a_shape_is_checked_as_protobuf_s_reading_is() -> None:
    req = request()
    req.inputs["x"].tensor_shape.dim[0].size = -1
    read = predict_wire.read(req.SerializeToString())
    assert read is not None
    with pytest.raises(InvalidInput, match=r"^tensor parsing error: x$"):
        conv.predict_inputs(read, SIGNATURE)


def left_to_protobuf() -> list[bytes]:
    typed = request()
    typed.inputs["x"].ClearField("tensor_content")
    typed.inputs["x"].float_val.extend([1.0] * 6)
    named = request()
    named.inputs["x"].tensor_shape.dim[0].name = "batch"
    unknown = request()
    unknown.inputs["x"].tensor_shape.unknown_rank = True
    strings = request()
    strings.inputs["s"].CopyFrom(tensorproto.make(np.array([b"a"], dtype=object), "BYTES"))
    streamed = request()
    streamed.predict_streamed_options.return_single_response = True
    empty = request()
    empty.inputs["e"].SetInParent()
    whole = request().SerializeToString()
    return (
        [m.SerializeToString() for m in (typed, named, unknown, strings, streamed, empty)]
        + [
            whole + request(name="n").SerializeToString(),  # model_spec twice: merged by protobuf
            whole[:-1],  # truncated
            whole + b"\x1a\x02\xff\xfe",  # an output_filter that is not UTF-8
        ]
    )


@pytest.mark.parametrize("data", left_to_protobuf())
def test_what_the_reader_does_not_take_is_left_to_protobuf(data: bytes) -> None:
    assert predict_wire.read(data) is None


def test_a_request_protobuf_refuses_is_invalid_input() -> None:
    with pytest.raises(InvalidInput, match=r"^the request is not a valid message"):
        predict_wire.request(request().SerializeToString()[:-1])


def test_model_spec_errors_are_tf_serving_s() -> None:
    with pytest.raises(InvalidInput, match=r"^Missing ModelSpec$"):
        predict_wire.request(pb.PredictRequest(output_filter=["y"]).SerializeToString())
    with pytest.raises(InvalidInput, match=r"^ModelSpec has no name specified\.$"):
        predict_wire.request(request(name="").SerializeToString())
