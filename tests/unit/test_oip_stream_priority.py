"""Each message of an OIP gRPC stream has its own priority: the stream's (x-priority) with the
message's own ``priority`` parameter, never the one an earlier message of the stream set (the
messages run in one task's context)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import numpy as np

from rosettaserve.core import share
from rosettaserve.core.types import InferenceRequest, InferenceResponse, Tensor
from rosettaserve.protocols.oip.grpc import OipServicer
from rosettaserve.protocols.oip.pb import grpc_service_pb2 as pb
from rosettaserve.web.grpc_services import CallTracker


class Version:
    name, version = "m", "1"
    invoker = None


class RecordingPlane:
    """Answers each request, noting the priority it was served with."""

    def __init__(self) -> None:
        self.priorities: list[int] = []

    async def loaded_version(self, name: str, version: str) -> Version:
        return Version()

    async def infer_stream(self, request: InferenceRequest) -> AsyncIterator[InferenceResponse]:
        self.priorities.append(share.SHARE.get().priority)
        data = np.zeros((1,), np.float32)
        yield InferenceResponse("m", "1", [Tensor("OUT", "FP32", (1,), data)], id=request.id)


def message(**parameters: int) -> Any:
    msg = pb.ModelInferRequest(model_name="m")
    msg.inputs.add(name="IN", datatype="FP32", shape=[1]).contents.fp32_contents.append(0.0)
    for name, value in parameters.items():
        msg.parameters[name].int64_param = value
    return msg


def test_a_messages_priority_does_not_carry_over_to_the_next() -> None:
    plane = RecordingPlane()
    servicer = OipServicer(plane, CallTracker())  # type: ignore[arg-type]

    async def main() -> list[Any]:
        async def requests() -> AsyncIterator[Any]:
            for msg in (message(priority=1), message(), message(priority=2), message()):
                yield msg

        share.SHARE.set(share.DEFAULT.prioritised(7))  # the stream's x-priority
        return [reply async for reply in servicer.ModelStreamInfer(requests(), None)]

    replies = asyncio.run(main())

    assert all(not reply.error_message for reply in replies), replies
    top, second = share.triton_level(1, "p"), share.triton_level(2, "p")
    assert plane.priorities == [top, 7, second, 7]
