"""What requested outputs' parameters ask beyond the tensor itself (Triton's extensions), in one
place for REST, gRPC and gRPC streaming: noted when a request is read (checked before the model
runs), applied to each answer before it is written."""

from __future__ import annotations

from rosettaserve.core.dataplane import DataPlane
from rosettaserve.core.types import InferenceRequest, InferenceResponse
from rosettaserve.protocols.oip import classification, shared_memory


def note(request: InferenceRequest) -> None:
    shared_memory.note_outputs(request)
    classification.note_outputs(request)


def answer(dp: DataPlane, request: InferenceRequest, response: InferenceResponse) -> None:
    """Outputs asked as classes replaced by them; outputs asked in shared memory written there."""
    context = request.context
    if classification.COUNTS in context:
        mv = dp.resolve(response.model_name, response.model_version)
        classification.classify(mv, request, response)
    if shared_memory.OUTPUTS in context:
        shared_memory.place_outputs(request, response)
