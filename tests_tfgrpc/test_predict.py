"""Predict with tensorflow-serving-api's stub: every dtype both ways, tensor_content and the
typed fields, signatures, versions and labels, output_filter, and TF Serving's errors."""

from __future__ import annotations

import grpc
import ml_dtypes
import numpy as np
import pytest
import tensorflow as tf
from tensorflow.core.framework import tensor_pb2
from tensorflow_serving.apis import predict_pb2

from tests_tfgrpc.conftest import DATATYPES

NUMPY = {
    "BOOL": np.bool_, "UINT8": np.uint8, "UINT16": np.uint16, "UINT32": np.uint32,
    "UINT64": np.uint64, "INT8": np.int8, "INT16": np.int16, "INT32": np.int32,
    "INT64": np.int64, "FP16": np.float16, "FP32": np.float32, "FP64": np.float64,
    "BF16": ml_dtypes.bfloat16, "BYTES": object,
}  # fmt: skip
TF_DTYPES = {
    "BOOL": tf.bool, "UINT8": tf.uint8, "UINT16": tf.uint16, "UINT32": tf.uint32,
    "UINT64": tf.uint64, "INT8": tf.int8, "INT16": tf.int16, "INT32": tf.int32,
    "INT64": tf.int64, "FP16": tf.float16, "FP32": tf.float32, "FP64": tf.float64,
    "BF16": tf.bfloat16, "BYTES": tf.string,
}  # fmt: skip


def values(datatype: str) -> np.ndarray:
    """A [2, 3] array with values that tell the dtype's edges apart."""
    if datatype == "BYTES":
        return np.array([[b"a", b"", b"\x00\xff"], [b"x" * 300, "é".encode(), b"z"]], dtype=object)
    if datatype == "BOOL":
        return np.array([[True, False, True], [False, False, True]])
    dtype = np.dtype(NUMPY[datatype])
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return np.array([[info.min, info.max, 0], [1, info.max - 1, 7]], dtype=dtype)
    return np.array(
        [[-1.5, 0.25, 3.0], [1e3, -0.0, 65504.0 if datatype == "FP16" else 7.5]]
    ).astype(dtype)


def request(model: str, proto: tensor_pb2.TensorProto, **spec: object) -> object:
    req = predict_pb2.PredictRequest()
    req.model_spec.name = model
    for key, value in spec.items():
        if key == "version":
            req.model_spec.version.value = value
        else:
            setattr(req.model_spec, key, value)
    req.inputs["INPUT0"].CopyFrom(proto)
    return req


@pytest.mark.parametrize("datatype", DATATYPES)
def test_every_dtype_round_trips(predictions: object, datatype: str) -> None:
    sent = values(datatype)
    proto = tf.make_tensor_proto(sent, dtype=TF_DTYPES[datatype])
    reply = predictions.Predict(request(f"identity_{datatype.lower()}", proto), timeout=30)
    out = reply.outputs["OUTPUT0"]
    assert out.dtype == TF_DTYPES[datatype].as_datatype_enum
    if datatype == "BYTES":
        assert list(out.string_val) == list(sent.reshape(-1))  # strings travel in string_val
    else:
        assert out.tensor_content  # TF Serving's AsProtoTensorContent
    got = tf.make_ndarray(out)
    assert got.shape == (2, 3)
    assert got.tolist() == sent.tolist()
    assert reply.model_spec.name == f"identity_{datatype.lower()}"
    assert reply.model_spec.version.value == 1
    assert reply.model_spec.signature_name == "serving_default"


@pytest.mark.parametrize("datatype", DATATYPES)
def test_typed_fields_one_value_fills_the_shape(predictions: object, datatype: str) -> None:
    one = values(datatype).reshape(-1)[1]
    proto = tf.make_tensor_proto(one, dtype=TF_DTYPES[datatype], shape=[2, 2])
    assert not proto.tensor_content  # a single value travels in the typed field
    reply = predictions.Predict(request(f"identity_{datatype.lower()}", proto), timeout=30)
    got = tf.make_ndarray(reply.outputs["OUTPUT0"])
    assert got.tolist() == [[one, one], [one, one]]


@pytest.mark.parametrize("datatype", ["FP32", "INT64", "BOOL", "BYTES", "FP16", "INT8"])
def test_typed_fields_every_value(predictions: object, datatype: str) -> None:
    sent = values(datatype)
    proto = tf.make_tensor_proto(sent, dtype=TF_DTYPES[datatype])
    typed = tensor_pb2.TensorProto(dtype=proto.dtype, tensor_shape=proto.tensor_shape)
    flat = sent.reshape(-1)
    if datatype == "FP32":
        typed.float_val.extend(flat.tolist())
    elif datatype == "INT64":
        typed.int64_val.extend(flat.tolist())
    elif datatype == "BOOL":
        typed.bool_val.extend(flat.tolist())
    elif datatype == "BYTES":
        typed.string_val.extend(flat.tolist())
    elif datatype == "FP16":
        typed.half_val.extend(flat.view(np.uint16).tolist())
    else:
        typed.int_val.extend(flat.tolist())
    reply = predictions.Predict(request(f"identity_{datatype.lower()}", typed), timeout=30)
    assert tf.make_ndarray(reply.outputs["OUTPUT0"]).tolist() == sent.tolist()


def test_half_plus_two(predictions: object) -> None:
    proto = tf.make_tensor_proto([1.0, 2.0, 5.0], dtype=tf.float32)
    req = predict_pb2.PredictRequest()
    req.model_spec.name = "half_plus_two"
    req.inputs["x"].CopyFrom(proto)
    reply = predictions.Predict(req, timeout=30)
    assert tf.make_ndarray(reply.outputs["y"]).tolist() == [2.5, 3.0, 4.5]
    assert reply.model_spec.version.value == 123


def test_versions_and_labels(predictions: object) -> None:
    proto = tf.make_tensor_proto([[1.0, 2.0]], dtype=tf.float32)
    by_number = {}
    for version in (1, 2):
        reply = predictions.Predict(request("versioned_python", proto, version=version), timeout=30)
        by_number[version] = tf.make_ndarray(reply.outputs["OUTPUT0"]).tolist()
        assert reply.model_spec.version.value == version
    for label, version in (("stable", 1), ("canary", 2)):
        reply = predictions.Predict(
            request("versioned_python", proto, version_label=label), timeout=30
        )
        assert reply.model_spec.version.value == version
        assert tf.make_ndarray(reply.outputs["OUTPUT0"]).tolist() == by_number[version]
    assert by_number[1] != by_number[2]


def test_output_filter_and_onnx(predictions: object) -> None:
    req = predict_pb2.PredictRequest()
    req.model_spec.name = "iris_sklearn"
    req.inputs["input"].CopyFrom(tf.make_tensor_proto([[5.1, 3.5, 1.4, 0.2]], dtype=tf.float64))
    req.output_filter.append("predict")
    reply = predictions.Predict(req, timeout=30)
    assert list(reply.outputs) == ["predict"]
    assert list(reply.outputs["predict"].string_val) == [b"setosa"]


def errors(predictions: object, req: object) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as info:
        predictions.Predict(req, timeout=30)
    return info.value


def test_errors(predictions: object) -> None:
    proto = tf.make_tensor_proto([[1.0]], dtype=tf.float32)
    missing = errors(predictions, request("no_such_model", proto))
    assert missing.code() == grpc.StatusCode.NOT_FOUND
    assert missing.details() == "Servable not found for request: Latest(no_such_model)"
    version = errors(predictions, request("identity_fp32", proto, version=9))
    assert version.code() == grpc.StatusCode.NOT_FOUND
    assert version.details() == "Servable not found for request: Specific(identity_fp32, 9)"
    signature = errors(predictions, request("identity_fp32", proto, signature_name="nope"))
    assert signature.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert signature.details() == 'Serving signature key "nope" not found.'
    dtype = errors(predictions, request("identity_fp32", tf.make_tensor_proto([[1]])))
    assert dtype.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert dtype.details() == "Expects arg[0] to be float but int32 is provided"
    bad = tensor_pb2.TensorProto(dtype=tf.float32.as_datatype_enum, tensor_content=b"\0" * 3)
    bad.tensor_shape.dim.add().size = 1
    parsing = errors(predictions, request("identity_fp32", bad))
    assert parsing.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert parsing.details() == "tensor parsing error: INPUT0"
    extra = request("identity_fp32", proto)
    extra.inputs["other"].CopyFrom(proto)
    size = errors(predictions, extra)
    assert size.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert size.details() == (
        "input size does not match signature: 2!=1 len({INPUT0,other}) != len({INPUT0}). "
        "Sent extra: {other}. Missing but required: {}."
    )
    no_spec = predict_pb2.PredictRequest()
    assert errors(predictions, no_spec).details() == "Missing ModelSpec"
    unknown_filter = request("identity_fp32", proto)
    unknown_filter.output_filter.append("nope")
    assert errors(predictions, unknown_filter).details() == (
        "output tensor alias not found in signature: nope Outputs expected to be in the set "
        "{OUTPUT0}."
    )
    label = errors(predictions, request("versioned_python", proto, version_label="nope"))
    assert label.code() == grpc.StatusCode.INVALID_ARGUMENT


def test_many_typed_values(predictions: object) -> None:
    """Past 16 Ki typed values, read on the request-work threads: the same answer."""
    sent = np.arange(40000, dtype=np.float32).reshape(200, 200)
    typed = tensor_pb2.TensorProto(dtype=tf.float32.as_datatype_enum)
    typed.tensor_shape.dim.add().size = 200
    typed.tensor_shape.dim.add().size = 200
    typed.float_val.extend(sent.reshape(-1).tolist())
    reply = predictions.Predict(request("identity_fp32", typed), timeout=60)
    assert np.array_equal(tf.make_ndarray(reply.outputs["OUTPUT0"]), sent)
