"""TF Serving's gRPC API: ``tensorflow.serving.PredictionService`` and ``ModelService``.

Each rpc reads its message into the pieces the REST API reads from JSON, runs the same shared
call (``service``), and writes TF Serving's answer. Errors are TF Serving's status codes: a
``ServingError`` becomes its own (NOT_FOUND for a missing model or version, INVALID_ARGUMENT
for a bad request), and Predict's unknown signature is FAILED_PRECONDITION, as TF Serving answers
it. ``HandleReloadConfigRequest`` is not served (UNIMPLEMENTED): model control is our
repository's own API.
"""

from __future__ import annotations

from typing import Any

from rosettaserve.core.dataplane import DataPlane
from rosettaserve.core.errors import InvalidInput
from rosettaserve.core.executor import run_request_work, run_sized
from rosettaserve.core.registry import ModelVersion
from rosettaserve.protocols.tfserving import convert, predict_wire, schema, service, signatures
from rosettaserve.protocols.tfserving import grpc_convert as conv
from rosettaserve.protocols.tfserving import messages as pb
from rosettaserve.protocols.tfserving.examples import ExamplesRequest
from rosettaserve.protocols.tfserving.status import model_status, servable
from rosettaserve.transport.grpc_context import Aborted
from rosettaserve.web.grpc_services import ServiceTable

PREDICTION_SERVICE = "tensorflow.serving.PredictionService"
MODEL_SERVICE = "tensorflow.serving.ModelService"
PROTOCOL = "tfserving_grpc"  # the metrics label
FAILED_PRECONDITION = 9
# typed values (``float_val``, ``string_val``, ...) past which a request's tensors are read on
# the request-work threads: each is a Python object read one by one (``tensor_content`` is not:
# it is used in place)
INLINE_TYPED_VALUES = 16 * 1024
_METHODS = {schema.METHOD_NAMES[m]: m for m in (schema.CLASSIFY, schema.REGRESS)}


def model_of(request: Any) -> str:
    """The model a request names, for the access line (Predict's are its bytes)."""
    if isinstance(request, bytes):
        try:
            return predict_wire.request(request).target.model or "-"
        except InvalidInput:
            return "-"
    tasks = getattr(request, "tasks", None)
    if tasks:
        return str(tasks[0].model_spec.name) or "-"
    spec = getattr(request, "model_spec", None)
    return (spec.name if spec is not None else "") or "-"


class PredictionServicer:
    def __init__(self, dp: DataPlane) -> None:
        self.dp = dp
        self.model_of = model_of

    async def Predict(self, request: bytes, context: Any) -> bytes:
        call = predict_wire.request(request)
        mv = servable(self.dp, call.target)
        name = call.signature_name or schema.DEFAULT_SIGNATURE
        found = signatures.named(mv, name)
        if found is None:
            raise Aborted(FAILED_PRECONDITION, f'Serving signature key "{name}" not found.', ())
        signature = signatures.checked(found, name, schema.PREDICT)
        conv.check_inputs(call, signature)
        resolved: ModelVersion | None = mv  # the data plane is handed the version found...
        if conv.typed_values(call) > INLINE_TYPED_VALUES:
            arrays = await run_request_work(conv.predict_inputs, call, signature)
            resolved = None  # ...unless the registry may have changed meanwhile: looked up again
        else:
            arrays = conv.predict_inputs(call, signature)
        wanted = conv.output_specs(call, signature)
        # service.predict's steps, awaited here and not in a coroutine of its own
        # [cost: inline-await]
        core = convert.inference_request(mv, signature, arrays, list(wanted.values()), PROTOCOL)
        response = await self.dp.infer(core, resolved)
        outputs = convert.by_alias(wanted, response.outputs)
        return conv.predict_response(mv, signature, outputs)  # serialized

    async def Classify(self, request: Any, context: Any) -> Any:
        target = predict_wire.target(request)
        examples = await _examples(request.input, request.model_spec.signature_name)
        done = await service.classify(self.dp, target, examples, PROTOCOL)
        response = pb.ClassificationResponse()
        conv.model_spec(response.model_spec, done.mv, done.signature.name)
        conv.classification_result(response.result, done.labels, done.scores)
        return response

    async def Regress(self, request: Any, context: Any) -> Any:
        target = predict_wire.target(request)
        examples = await _examples(request.input, request.model_spec.signature_name)
        done = await service.regress(self.dp, target, examples, PROTOCOL)
        response = pb.RegressionResponse()
        conv.model_spec(response.model_spec, done.mv, done.signature.name)
        conv.regression_result(response.result, done.values)
        return response

    async def MultiInference(self, request: Any, context: Any) -> Any:
        """Each task (classify or regress, one signature each) over the same examples."""
        tasks = _checked_tasks(request)
        response = pb.MultiInferenceResponse()
        for task in tasks:
            target = predict_wire.target(task)
            name = task.model_spec.signature_name
            examples = await _examples(request.input, name)
            result = response.results.add()
            if _METHODS[task.method_name] == schema.CLASSIFY:
                classified = await service.classify(self.dp, target, examples, PROTOCOL)
                conv.model_spec(result.model_spec, classified.mv, classified.signature.name)
                out = result.classification_result
                conv.classification_result(out, classified.labels, classified.scores)
            else:
                regressed = await service.regress(self.dp, target, examples, PROTOCOL)
                conv.model_spec(result.model_spec, regressed.mv, regressed.signature.name)
                conv.regression_result(result.regression_result, regressed.values)
        return response

    async def GetModelMetadata(self, request: Any, context: Any) -> Any:
        target = predict_wire.target(request)
        conv.check_metadata_fields(request)
        return conv.metadata_response(signatures.metadata(servable(self.dp, target)))


async def _examples(input_: Any, signature_name: str) -> ExamplesRequest:
    """The tf.Examples read as the REST path reads its JSON examples: on the request-work
    threads past the size REST reads there (each value becomes a Python object)."""
    return await run_sized(input_.ByteSize(), conv.examples_request, input_, signature_name)


def _checked_tasks(request: Any) -> list[Any]:
    """The tasks, with TF Serving's checks: one model, each signature once, known methods."""
    if not request.tasks:
        raise InvalidInput("MultiInferenceRequest must specify at least one task")
    model, seen = "", set()
    for task in request.tasks:
        name = task.model_spec.name
        if not name:
            raise InvalidInput("Found ModelSpec with an empty model name.")
        if model and name != model:
            raise InvalidInput(
                "All ModelSpecs in a MultiInferenceRequest must access the same model name."
            )
        model = name
        signature = task.model_spec.signature_name or schema.DEFAULT_SIGNATURE
        if signature in seen:
            raise InvalidInput(f"Duplicate evaluation of signature: {signature}")
        seen.add(signature)
        if task.method_name not in _METHODS:
            raise Aborted(12, f"Unsupported signature method_name: {task.method_name}", ())
    return list(request.tasks)


class ModelServicer:
    def __init__(self, dp: DataPlane) -> None:
        self.dp = dp
        self.model_of = model_of

    async def GetModelStatus(self, request: Any, context: Any) -> Any:
        return conv.status_response(model_status(self.dp, predict_wire.target(request)))


# rpc name -> (request type, response type, streaming)
PREDICTION_RPCS: dict[str, tuple[Any, Any, bool | str]] = {
    "Predict": (bytes, bytes, False),  # read and written by hand (predict_wire, grpc_convert)
    "Classify": (pb.ClassificationRequest, pb.ClassificationResponse, False),
    "Regress": (pb.RegressionRequest, pb.RegressionResponse, False),
    "MultiInference": (pb.MultiInferenceRequest, pb.MultiInferenceResponse, False),
    "GetModelMetadata": (pb.GetModelMetadataRequest, pb.GetModelMetadataResponse, False),
}
MODEL_RPCS: dict[str, tuple[Any, Any, bool | str]] = {
    "GetModelStatus": (pb.GetModelStatusRequest, pb.GetModelStatusResponse, False),
}
SERVICES = (PREDICTION_SERVICE, MODEL_SERVICE)


def services(dp: DataPlane) -> list[ServiceTable]:
    """Both services, as the gRPC port registers them."""
    return [
        (PREDICTION_SERVICE, PredictionServicer(dp), PREDICTION_RPCS),
        (MODEL_SERVICE, ModelServicer(dp), MODEL_RPCS),
    ]
