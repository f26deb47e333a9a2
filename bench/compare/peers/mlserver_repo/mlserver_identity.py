"""MLServer 1.7 identity runtime: OUTPUT0 is INPUT0, passed through without decoding."""

from __future__ import annotations

from mlserver import MLModel
from mlserver.types import InferenceRequest, InferenceResponse, ResponseOutput


class IdentityRuntime(MLModel):
    async def predict(self, payload: InferenceRequest) -> InferenceResponse:
        tensor = payload.inputs[0]
        output = ResponseOutput(
            name="OUTPUT0", shape=tensor.shape, datatype=tensor.datatype, data=tensor.data
        )
        return InferenceResponse(model_name=self.name, id=payload.id, outputs=[output])
