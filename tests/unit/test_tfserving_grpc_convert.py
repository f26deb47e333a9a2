"""TF Serving gRPC messages <-> the shared calls' pieces (protocols/tfserving/grpc_convert.py),
on hand-built messages: ModelSpecs, Predict's checks, tf.Examples, metadata and status."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from rosettaserve.core.errors import InvalidInput
from rosettaserve.core.registry import ModelVersion, VersionState
from rosettaserve.core.types import Tensor, TensorSpec
from rosettaserve.protocols.tfserving import examples, predict_wire, tensorproto
from rosettaserve.protocols.tfserving import grpc_convert as conv
from rosettaserve.protocols.tfserving import messages as pb
from rosettaserve.protocols.tfserving.signatures import Signature
from rosettaserve.protocols.tfserving.status import Target

X = TensorSpec("x", "FP32", (-1,))
Y = TensorSpec("y", "FP32", (-1,))
SIGNATURE = Signature("serving_default", "predict", {"x": X}, {"y": Y, "z": Y})


def targets(req: Any) -> list[Target]:
    """The request's target as every rpc reads it, and as Predict reads it from the wire."""
    read = predict_wire.read(req.SerializeToString())
    assert read is not None
    return [predict_wire.target(req), read.target]


def test_target_from_model_spec() -> None:
    req = pb.PredictRequest()
    for reader in (predict_wire.target, lambda r: predict_wire.read(r.SerializeToString())):
        with pytest.raises(InvalidInput, match=r"^Missing ModelSpec$"):
            reader(req)
    req.model_spec.signature_name = "s"
    for reader in (predict_wire.target, lambda r: predict_wire.read(r.SerializeToString())):
        with pytest.raises(InvalidInput, match=r"^ModelSpec has no name specified\.$"):
            reader(req)
    req.model_spec.name = "m"
    assert targets(req) == [Target("m")] * 2
    req.model_spec.version.value = 0  # set, even to 0: a specific version
    assert targets(req) == [Target("m", 0)] * 2
    req.model_spec.version_label = "stable"
    assert targets(req) == [Target("m", label="stable")] * 2


def call(**fields: Any) -> predict_wire.Predict:
    """A PredictRequest for model m, as Predict reads a parsed message."""
    return predict_wire.from_message(pb.PredictRequest(model_spec={"name": "m"}, **fields))


def floats(*values: float) -> Any:
    proto = pb.TensorProto(dtype=pb.DT_FLOAT, float_val=values)
    proto.tensor_shape.dim.add().size = len(values)
    return proto


def test_predict_inputs_and_checks() -> None:
    req = call(inputs={"x": floats(1.0, 2.0)})
    conv.check_inputs(req, SIGNATURE)
    assert conv.predict_inputs(req, SIGNATURE)["x"].tolist() == [1.0, 2.0]
    with pytest.raises(InvalidInput) as info:
        conv.check_inputs(call(inputs={"w": floats(1.0)}), SIGNATURE)
    assert info.value.message == (
        "input size does not match signature: 1!=1 len({w}) != len({x}). Sent extra: {w}. "
        "Missing but required: {x}."
    )
    ints = pb.TensorProto(dtype=pb.DT_INT64, int64_val=[1])
    with pytest.raises(InvalidInput, match=r"^Expects arg\[0\] to be float but int64 is provided$"):
        conv.predict_inputs(call(inputs={"x": ints}), SIGNATURE)


def test_output_filter() -> None:
    assert list(conv.output_specs(call(), SIGNATURE)) == ["y", "z"]
    assert list(conv.output_specs(call(output_filter=["z"]), SIGNATURE)) == ["z"]
    with pytest.raises(InvalidInput, match=r"^duplicate output tensor alias: z$"):
        conv.output_specs(call(output_filter=["z", "z"]), SIGNATURE)
    with pytest.raises(InvalidInput) as info:
        conv.output_specs(call(output_filter=["q"]), SIGNATURE)
    assert info.value.message == (
        "output tensor alias not found in signature: q Outputs expected to be in the set {y,z}."
    )


def example(**features: Any) -> Any:
    made = pb.Example()
    for name, values in features.items():
        feature = made.features.feature[name]
        if isinstance(values[0], bytes):
            feature.bytes_list.value.extend(values)
        elif isinstance(values[0], int):
            feature.int64_list.value.extend(values)
        else:
            feature.float_list.value.extend(values)
    return made


def test_examples_read_as_the_rest_path_reads_them() -> None:
    listed = pb.Input()
    listed.example_list_with_context.examples.extend([example(a=[1.5]), example(a=[2.5])])
    listed.example_list_with_context.context.CopyFrom(example(b=[b"t"], c=[3]))
    request = conv.examples_request(listed, "sig")
    assert request.signature_name == "sig"
    assert [f["a"].values for f in request.examples] == [[1.5], [2.5]]
    assert request.context["b"] == examples.Feature(examples.BYTES, [b"t"])
    assert request.context["c"] == examples.Feature(examples.INT64, [3])
    specs = {"a": TensorSpec("a", "FP32", (-1,)), "c": TensorSpec("c", "INT64", (-1,))}
    arrays = examples.to_inputs(request, specs)
    assert arrays["a"].tolist() == [1.5, 2.5]
    assert arrays["c"].tolist() == [3, 3]
    for empty in (pb.Input(), pb.Input(example_list=pb.ExampleList())):
        with pytest.raises(InvalidInput, match=r"^Input is empty\.$"):
            conv.examples_request(empty, "")


def test_results() -> None:
    result = pb.ClassificationResult()
    labels = np.array([["a", "b"]], dtype=object)
    conv.classification_result(result, labels, np.array([[0.25, 0.75]], dtype=np.float32))
    assert [(c.label, c.score) for c in result.classifications[0].classes] == [
        ("a", 0.25),
        ("b", 0.75),
    ]
    regressions = pb.RegressionResult()
    conv.regression_result(regressions, np.array([1.5, -2.0], dtype=np.float32))
    assert [r.value for r in regressions.regressions] == [1.5, -2.0]


def test_predict_response_names_the_version_and_signature() -> None:
    outputs = {"y": Tensor("y", "FP32", (1,), np.array([2.5], dtype=np.float32))}
    written = conv.predict_response(served("m", "7"), SIGNATURE, outputs)
    response = pb.PredictResponse.FromString(written)
    assert (response.model_spec.name, response.model_spec.version.value) == ("m", 7)
    assert response.model_spec.signature_name == "serving_default"
    assert response.outputs["y"].tensor_content == np.float32(2.5).tobytes()
    assert list(response.outputs["y"].tensor_shape.dim) == [pb.TensorShapeProto.Dim(size=1)]


def served(name: str, version: str) -> ModelVersion:
    """A version as the registry holds it (compiled, the writer takes nothing else)."""
    return ModelVersion(name, version, "python", VersionState.READY, inputs=[X], outputs=[Y])


def by_protobuf(data: np.ndarray, datatype: str) -> Any:
    """The TensorProto TF Serving answers, built with protobuf's own API."""
    made = pb.TensorProto(dtype=tensorproto.TO_DT[datatype])
    made.tensor_shape.dim.extend(pb.TensorShapeProto.Dim(size=d) for d in data.shape)
    if datatype == "BYTES":
        made.string_val.extend(data.reshape(-1).tolist())
    else:
        made.tensor_content = data.tobytes()
    return made


@pytest.mark.parametrize("version", ["0", "1", "300", str(2**63 - 1)])
@pytest.mark.parametrize("datatype", ["FP32", "BYTES", "BOOL", "UINT64"])
def test_the_hand_written_answer_is_the_message_protobuf_writes(
    version: str, datatype: str
) -> None:
    rng = np.random.default_rng(3)
    big = rng.integers(0, 255, (2, 200)).astype(np.uint8)  # sizes past one varint byte
    data = big.astype(np.float32)
    if datatype == "BYTES":
        data = np.array([bytes([int(v)]) * int(v) for v in big.reshape(-1)], dtype=object)
        data = data.reshape(big.shape)
    elif datatype == "BOOL":
        data = big > 100
    elif datatype == "UINT64":
        data = big.astype(np.uint64) * np.uint64(2**55)
    empty = np.zeros((0, 3), dtype=np.float32) if datatype == "FP32" else data
    outputs = {
        "a": Tensor("a", datatype, data.shape, data),
        "é": Tensor("b", datatype, empty.shape, empty),
    }
    expected = pb.PredictResponse()
    expected.model_spec.name = "model"
    expected.model_spec.version.value = int(version)
    expected.model_spec.signature_name = "serving_default"
    for alias, tensor in outputs.items():
        expected.outputs[alias].CopyFrom(by_protobuf(tensor.data, datatype))
    written = conv.predict_response(served("model", version), SIGNATURE, outputs)
    assert pb.PredictResponse.FromString(written) == expected


def test_metadata_and_status_from_the_rest_documents() -> None:
    info = {"dtype": "DT_FLOAT", "tensor_shape": {"dim": [{"size": "-1", "name": ""}]}}
    doc = {
        "model_spec": {"name": "m", "signature_name": "", "version": "3"},
        "metadata": {
            "signature_def": {
                "signature_def": {
                    "serving_default": {
                        "inputs": {"x": {**info, "name": "x"}},
                        "outputs": {"y": {**info, "name": "y"}},
                        "method_name": "tensorflow/serving/predict",
                        "defaults": {},
                    }
                }
            }
        },
    }
    response = conv.metadata_response(doc)
    defs = pb.SignatureDefMap()
    assert response.metadata["signature_def"].Unpack(defs)
    assert response.metadata["signature_def"].type_url.endswith(
        "/tensorflow.serving.SignatureDefMap"
    )
    found = defs.signature_def["serving_default"]
    assert found.inputs["x"].dtype == pb.DT_FLOAT
    assert found.inputs["x"].tensor_shape.dim[0].size == -1
    assert found.method_name == "tensorflow/serving/predict"
    assert response.model_spec.version.value == 3
    with pytest.raises(InvalidInput, match=r"^GetModelMetadataRequest must specify at least one"):
        conv.check_metadata_fields(pb.GetModelMetadataRequest())
    status = conv.status_response(
        {
            "model_version_status": [
                {
                    "version": "2",
                    "state": "AVAILABLE",
                    "status": {"error_code": "OK", "error_message": ""},
                },
                {
                    "version": "1",
                    "state": "END",
                    "status": {"error_code": "UNKNOWN", "error_message": "boom"},
                },
            ]
        }
    )
    first, second = status.model_version_status
    assert (first.version, first.state, first.status.error_code) == (
        2,
        pb.ModelVersionStatus.AVAILABLE,
        0,
    )
    assert (second.state, second.status.error_code, second.status.error_message) == (
        pb.ModelVersionStatus.END,
        2,
        "boom",
    )
