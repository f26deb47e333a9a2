"""TF Serving's gRPC messages <-> the pieces the shared calls (``service``) take and give. Pure
functions: a ModelSpec as a ``Target``, Predict's inputs as arrays, tf.Example lists as an
``ExamplesRequest``, and answers as messages."""

from __future__ import annotations

from typing import Any

import numpy as np
from google.protobuf import json_format

from rosettaserve.core.errors import InvalidInput
from rosettaserve.core.registry import ModelVersion
from rosettaserve.core.types import Tensor, TensorSpec
from rosettaserve.protocols.tfserving import examples, schema, tensorproto
from rosettaserve.protocols.tfserving import messages as pb
from rosettaserve.protocols.tfserving.predict_wire import Content, Predict
from rosettaserve.protocols.tfserving.signatures import Signature

SIGNATURE_DEF = "signature_def"  # the one metadata field TF Serving serves
_ERROR_CODES = {"OK": 0, "UNKNOWN": 2}  # tensorflow.error.Code
_SPEC_CACHE = "tfserving.grpc.model_spec"
_KEYS: dict[str, bytes] = {}  # an output alias -> its field in the outputs map's entry


def model_spec(out: Any, mv: ModelVersion, signature_name: str) -> None:
    """What TF Serving answers in a response's model_spec: the name, the version served and
    the signature used."""
    out.name = mv.name
    out.version.value = int(mv.version)
    out.signature_name = signature_name


# -- Predict ----------------------------------------------------------------------------------


def check_inputs(request: Predict, signature: Signature) -> None:
    """Every signature input sent, and nothing else (TF Serving's message, sets sorted)."""
    sent_inputs, wanted_inputs = request.inputs, signature.inputs
    if len(sent_inputs) == len(wanted_inputs) and all(a in sent_inputs for a in wanted_inputs):
        return  # (not keys() == keys(): compiled, two views and a generic compare)
    sent, wanted = set(sent_inputs), set(wanted_inputs)
    raise InvalidInput(
        f"input size does not match signature: {len(sent)}!={len(wanted)} "
        f"len({{{_join(sent)}}}) != len({{{_join(wanted)}}}). Sent extra: "
        f"{{{_join(sent - wanted)}}}. Missing but required: {{{_join(wanted - sent)}}}."
    )


def _join(names: set[str]) -> str:
    return ",".join(sorted(names))


def predict_inputs(request: Predict, signature: Signature) -> dict[str, np.ndarray]:
    """One array per signature input, in the datatype the model takes."""
    arrays = {}
    for index, (alias, spec) in enumerate(signature.inputs.items()):
        tensor = request.inputs[alias]
        if type(tensor) is Content:
            datatype, array = tensorproto.content_array(
                tensor.dtype,
                tensor.dims,
                tensor.data,
                start=tensor.start,
                end=tensor.end,
                alias=alias,
            )
        else:
            datatype, array = tensorproto.to_array(tensor, alias)
        if datatype != spec.datatype:  # the session's own check, as TF answers it
            raise InvalidInput(
                f"Expects arg[{index}] to be {schema.tf_type(spec.datatype).short} but "
                f"{schema.tf_type(datatype).short} is provided"
            )
        arrays[alias] = array
    return arrays


def typed_values(request: Predict) -> int:
    """How many values the request's tensors hold in typed fields (read one by one)."""
    return sum(
        tensorproto.typed_count(proto)
        for proto in request.inputs.values()
        if type(proto) is not Content
    )


def output_specs(request: Predict, signature: Signature) -> dict[str, TensorSpec]:
    """The outputs ``output_filter`` asks for (all when empty), with TF Serving's errors."""
    if not request.output_filter:
        return signature.outputs  # read, never changed
    chosen: dict[str, TensorSpec] = {}
    for alias in request.output_filter:
        spec = signature.outputs.get(alias)
        if spec is None:
            raise InvalidInput(
                f"output tensor alias not found in signature: {alias} Outputs expected to be "
                f"in the set {{{_join(set(signature.outputs))}}}."
            )
        if alias in chosen:
            raise InvalidInput(f"duplicate output tensor alias: {alias}")
        chosen[alias] = spec
    return chosen


def predict_response(mv: ModelVersion, signature: Signature, outputs: dict[str, Tensor]) -> bytes:
    """PredictResponse, serialized by hand (``tensorproto.wire_parts``): the outputs map, then
    the model_spec served (name, version, signature)."""
    parts: list[tensorproto.Part] = []
    for alias, tensor in outputs.items():
        tensor_parts = tensorproto.wire_parts(tensor.data, tensor.datatype)
        key = _KEYS.get(alias)
        if key is None:  # an alias of a served signature: a few, each written once
            key = _KEYS[alias] = _text_field(1, alias)
        size = 0
        for part in tensor_parts:
            size += len(part)
        value_head = b"\x12" + tensorproto.varint(size)
        entry_size = len(key) + len(value_head) + size
        parts.append(b"\x0a")  # appended one by one: compiled, no list or bytes made for them
        parts.append(tensorproto.varint(entry_size))
        parts.append(key)
        parts.append(value_head)
        parts.extend(tensor_parts)
    parts.append(_spec_field(mv, signature.name))
    return b"".join(parts)


def _spec_field(mv: ModelVersion, signature_name: str) -> bytes:
    """The answer's model_spec field, written once per version and signature."""
    cache: dict[str, bytes] | None = mv.extra.get(_SPEC_CACHE)
    if cache is None:  # (not setdefault: its default would be a new dict every call)
        cache = mv.extra[_SPEC_CACHE] = {}
    written = cache.get(signature_name)
    if written is None:
        version = int(mv.version)
        number = b"\x08" + tensorproto.varint(version) if version else b""
        spec = _text_field(1, mv.name) + tensorproto.field(2, number)
        written = cache[signature_name] = tensorproto.field(
            2, spec + _text_field(3, signature_name)
        )
    return written


def _text_field(number: int, text: str) -> bytes:
    return tensorproto.field(number, text.encode()) if text else b""


# -- Classify, Regress, MultiInference --------------------------------------------------------


def examples_request(input_: Any, signature_name: str) -> examples.ExamplesRequest:
    """tf.Examples (ExampleList or ExampleListWithContext) as the REST path reads them."""
    kind = input_.WhichOneof("kind")
    if kind is None:
        raise InvalidInput("Input is empty.")
    listed = getattr(input_, kind)
    if not listed.examples:
        raise InvalidInput("Input is empty.")
    context = {}
    if kind == "example_list_with_context":
        context = example(listed.context)
    return examples.ExamplesRequest(
        signature_name, context, [example(item) for item in listed.examples]
    )


def example(message: Any) -> examples.Example:
    features: examples.Example = {}
    for name, feature in message.features.feature.items():
        kind = feature.WhichOneof("kind")
        if kind == "int64_list":
            features[name] = examples.Feature(examples.INT64, list(feature.int64_list.value))
        elif kind == "float_list":
            features[name] = examples.Feature(examples.FLOAT, list(feature.float_list.value))
        elif kind == "bytes_list":
            features[name] = examples.Feature(examples.BYTES, list(feature.bytes_list.value))
        else:
            features[name] = examples.Feature()  # a feature with no values
    return features


def classification_result(out: Any, labels: np.ndarray, scores: np.ndarray | None) -> None:
    for i, row in enumerate(labels):
        classes = out.classifications.add().classes
        for j, label in enumerate(row):
            item = classes.add()
            item.label = label
            if scores is not None:
                item.score = float(scores[i, j])


def regression_result(out: Any, values: np.ndarray) -> None:
    regressions = out.regressions
    for value in values.tolist():
        regressions.add().value = value


# -- GetModelMetadata, GetModelStatus ---------------------------------------------------------


def check_metadata_fields(request: Any) -> None:
    if not request.metadata_field:
        raise InvalidInput("GetModelMetadataRequest must specify at least one metadata_field")
    for field in request.metadata_field:
        if field != SIGNATURE_DEF:
            raise InvalidInput(f"Metadata field {field} is not supported")


def metadata_response(doc: dict[str, Any]) -> Any:
    """The REST metadata document (``signatures.metadata``) as GetModelMetadataResponse: the
    same SignatureDefs, packed in an Any under ``signature_def``."""
    response = pb.GetModelMetadataResponse()
    spec = doc["model_spec"]
    response.model_spec.name = spec["name"]
    response.model_spec.version.value = int(spec["version"])
    defs = json_format.ParseDict(doc["metadata"][SIGNATURE_DEF], pb.SignatureDefMap())
    response.metadata[SIGNATURE_DEF].Pack(defs)
    return response


def status_response(doc: dict[str, Any]) -> Any:
    """The REST status document (``status.model_status``) as GetModelStatusResponse."""
    response = pb.GetModelStatusResponse()
    for entry in doc["model_version_status"]:
        item = response.model_version_status.add()
        item.version = int(entry["version"])
        item.state = pb.ModelVersionStatus.State.Value(entry["state"])
        item.status.error_code = _ERROR_CODES[entry["status"]["error_code"]]
        item.status.error_message = entry["status"]["error_message"]
    return response
