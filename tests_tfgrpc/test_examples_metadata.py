"""Classify, Regress and MultiInference with tf.Example inputs, GetModelMetadata and
GetModelStatus, each against our TF Serving REST answer for the same request."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

import grpc
import pytest
import tensorflow as tf
from google.protobuf import json_format
from tensorflow_serving.apis import (
    classification_pb2,
    get_model_metadata_pb2,
    get_model_status_pb2,
    inference_pb2,
    input_pb2,
    regression_pb2,
)

from tests.serverproc import ServerProcess


def rest(server: ServerProcess, path: str, body: dict[str, Any] | None = None) -> Any:
    data = None if body is None else json.dumps(body).encode()
    with urllib.request.urlopen(server.http_url + path, data=data, timeout=30) as reply:
        return json.loads(reply.read())


def example(**features: float) -> tf.train.Example:
    made = {
        k: tf.train.Feature(float_list=tf.train.FloatList(value=[v])) for k, v in features.items()
    }
    return tf.train.Example(features=tf.train.Features(feature=made))


def example_input(*xs: float, context: tf.train.Example | None = None) -> input_pb2.Input:
    found = input_pb2.Input()
    if context is None:
        found.example_list.examples.extend(example(x=x) for x in xs)
    else:
        listed = found.example_list_with_context
        listed.examples.extend(example() for _ in xs)
        listed.context.CopyFrom(context)
    return found


def test_regress_matches_rest(predictions: Any, server: ServerProcess) -> None:
    req = regression_pb2.RegressionRequest()
    req.model_spec.name = "half_plus_two"
    req.model_spec.signature_name = "regress_x_to_y"
    req.input.CopyFrom(example_input(1.0, 2.0, 5.0))
    reply = predictions.Regress(req, timeout=30)
    got = [r.value for r in reply.result.regressions]
    body = {"signature_name": "regress_x_to_y", "examples": [{"x": 1.0}, {"x": 2.0}, {"x": 5.0}]}
    assert got == rest(server, "/v1/models/half_plus_two:regress", body)["results"]
    assert got == [2.5, 3.0, 4.5]
    assert reply.model_spec.signature_name == "regress_x_to_y"
    assert reply.model_spec.version.value == 123


def test_classify_with_context_matches_rest(predictions: Any, server: ServerProcess) -> None:
    req = classification_pb2.ClassificationRequest()
    req.model_spec.name = "half_plus_two"
    req.model_spec.signature_name = "classify_x_to_y"
    req.input.CopyFrom(example_input(0.0, 0.0, context=example(x=4.0)))
    reply = predictions.Classify(req, timeout=30)
    got = [[[c.label, c.score] for c in row.classes] for row in reply.result.classifications]
    body = {"signature_name": "classify_x_to_y", "context": {"x": 4.0}, "examples": [{}, {}]}
    assert got == rest(server, "/v1/models/half_plus_two:classify", body)["results"]
    assert got == [[["", 4.0]], [["", 4.0]]]


def test_multi_inference(predictions: Any) -> None:
    req = inference_pb2.MultiInferenceRequest()
    for signature, method in (("regress_x_to_y", "regress"), ("classify_x_to_y", "classify")):
        task = req.tasks.add()
        task.model_spec.name = "half_plus_two"
        task.model_spec.signature_name = signature
        task.method_name = f"tensorflow/serving/{method}"
    req.input.CopyFrom(example_input(1.0, 3.0))
    reply = predictions.MultiInference(req, timeout=30)
    regress, classify = reply.results
    assert [r.value for r in regress.regression_result.regressions] == [2.5, 3.5]
    scores = [
        [c.score for c in row.classes] for row in classify.classification_result.classifications
    ]
    assert scores == [[2.5], [3.5]]
    assert classify.model_spec.signature_name == "classify_x_to_y"
    duplicate = inference_pb2.MultiInferenceRequest()
    duplicate.tasks.extend([req.tasks[0], req.tasks[0]])
    duplicate.input.CopyFrom(req.input)
    with pytest.raises(grpc.RpcError) as info:
        predictions.MultiInference(duplicate, timeout=30)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert info.value.details() == "Duplicate evaluation of signature: regress_x_to_y"


def test_example_errors(predictions: Any) -> None:
    req = regression_pb2.RegressionRequest()
    req.model_spec.name = "half_plus_two"
    req.model_spec.signature_name = "regress_x_to_y"
    with pytest.raises(grpc.RpcError) as empty:
        predictions.Regress(req, timeout=30)
    assert (empty.value.code(), empty.value.details()) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        "Input is empty.",
    )
    req.input.example_list.examples.add()  # an example without the feature x
    with pytest.raises(grpc.RpcError) as missing:
        predictions.Regress(req, timeout=30)
    assert "Feature: x (data type: float) is required but could not be found." in (
        missing.value.details()
    )


@pytest.mark.parametrize("model", ["half_plus_two", "mlp_onnx", "iris_sklearn"])
def test_metadata_matches_rest(predictions: Any, server: ServerProcess, model: str) -> None:
    req = get_model_metadata_pb2.GetModelMetadataRequest()
    req.model_spec.name = model
    req.metadata_field.append("signature_def")
    reply = predictions.GetModelMetadata(req, timeout=30)
    defs = get_model_metadata_pb2.SignatureDefMap()
    assert reply.metadata["signature_def"].Unpack(defs)
    got = json_format.MessageToDict(defs, preserving_proto_field_name=True)
    expected = rest(server, f"/v1/models/{model}/metadata")
    for signature in expected["metadata"]["signature_def"]["signature_def"].values():
        signature.pop("defaults")  # an empty map: not printed by MessageToDict
        for info in (*signature["inputs"].values(), *signature["outputs"].values()):
            info["tensor_shape"].pop("unknown_rank")  # false: not printed either
            for dim in info["tensor_shape"]["dim"]:
                dim.pop("name")
    assert got == expected["metadata"]["signature_def"]
    assert reply.model_spec.name == model
    assert str(reply.model_spec.version.value) == expected["model_spec"]["version"]
    req.metadata_field[0] = "graph"
    with pytest.raises(grpc.RpcError) as info:
        predictions.GetModelMetadata(req, timeout=30)
    assert info.value.details() == "Metadata field graph is not supported"


def test_model_status(models: Any, server: ServerProcess) -> None:
    req = get_model_status_pb2.GetModelStatusRequest()
    req.model_spec.name = "versioned_python"
    reply = models.GetModelStatus(req, timeout=30)
    got = json_format.MessageToDict(reply, preserving_proto_field_name=True)
    expected = rest(server, "/v1/models/versioned_python")
    for status in expected["model_version_status"]:
        status["status"] = {}  # error_code OK and an empty message: not printed
    assert got == {"model_version_status": expected["model_version_status"]}
    req.model_spec.version.value = 7
    with pytest.raises(grpc.RpcError) as info:
        models.GetModelStatus(req, timeout=30)
    assert info.value.code() == grpc.StatusCode.NOT_FOUND
    assert info.value.details() == "Could not find version 7 of model versioned_python"


def test_reload_config_is_not_served(models: Any) -> None:
    from tensorflow_serving.apis import model_management_pb2

    with pytest.raises(grpc.RpcError) as info:
        models.HandleReloadConfigRequest(model_management_pb2.ReloadConfigRequest(), timeout=30)
    assert info.value.code() == grpc.StatusCode.UNIMPLEMENTED


def test_many_examples(predictions: Any) -> None:
    """Past 64 KiB of examples, read on the request-work threads: the same answers."""
    xs = [float(i) for i in range(20000)]
    req = regression_pb2.RegressionRequest()
    req.model_spec.name = "half_plus_two"
    req.model_spec.signature_name = "regress_x_to_y"
    req.input.CopyFrom(example_input(*xs))
    assert req.input.ByteSize() > 64 * 1024
    reply = predictions.Regress(req, timeout=60)
    assert [r.value for r in reply.result.regressions] == [0.5 * x + 2 for x in xs]
