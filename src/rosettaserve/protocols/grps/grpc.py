"""grps over gRPC (grps.protos.v1.GrpsService): each rpc a few lines over GrpsApi.

The transport status is always OK: success or failure travels in the reply's ``status``, with
the same code and message the REST route gives.
"""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from rosettaserve.core.executor import LargeWork, run_request_work
from rosettaserve.protocols.grps import convert
from rosettaserve.protocols.grps.api import GrpsApi, failure_for
from rosettaserve.protocols.grps.pb import grps_pb2 as pb

SERVICE = "grps.protos.v1.GrpsService"
PROTOCOL = "grps_grpc"  # the metrics label
Unary = Callable[["GrpsServicer", Any, Any], Awaitable[Any]]


def in_body(rpc: Unary) -> Unary:
    """Errors become the reply's FAILURE status instead of a gRPC status."""

    @functools.wraps(rpc)
    async def guarded(self: GrpsServicer, request: Any, context: Any) -> Any:
        try:
            return await rpc(self, request, context)
        except Exception as exc:
            return failure_for(exc)

    return guarded


class GrpsServicer:
    def __init__(self, api: GrpsApi) -> None:
        self.api = api

    @staticmethod
    def model_of(request: Any) -> str:
        """The model a request names (``name`` or ``name-version``), for the access line."""
        return getattr(request, "model", "") or "-"

    @in_body
    async def Predict(self, request: Any, context: Any) -> Any:
        payload = await _payload(request)
        return convert.to_message(await self.api.infer(payload, protocol=PROTOCOL), payload.form)

    async def PredictStreaming(self, request: Any, context: Any) -> AsyncIterator[Any]:
        """A generator model's replies one by one; an error ends the stream with a FAILURE."""
        try:
            payload = await _payload(request)
            async for response in self.api.infer_stream(payload, protocol=PROTOCOL):
                yield convert.to_message(response, payload.form)
        except Exception as exc:
            yield failure_for(exc)

    @in_body
    async def Online(self, request: Any, context: Any) -> Any:
        self.api.set_online(True)
        return convert.ok()

    @in_body
    async def Offline(self, request: Any, context: Any) -> Any:
        self.api.set_online(False)
        return convert.ok()

    @in_body
    async def CheckLiveness(self, request: Any, context: Any) -> Any:
        return convert.ok()

    @in_body
    async def CheckReadiness(self, request: Any, context: Any) -> Any:
        return self.api.readiness()

    @in_body
    async def ServerMetadata(self, request: Any, context: Any) -> Any:
        return convert.ok(str_data=self.api.server_metadata())

    @in_body
    async def ModelMetadata(self, request: Any, context: Any) -> Any:
        return convert.ok(str_data=self.api.model_metadata(request))


# rpc name -> (request type, response type, streaming: "server" = one request, many replies)
RPCS: dict[str, tuple[Any, Any, bool | str]] = {
    "Predict": (pb.GrpsMessage, pb.GrpsMessage, False),
    "PredictStreaming": (pb.GrpsMessage, pb.GrpsMessage, "server"),
    "Online": (pb.GrpsMessage, pb.GrpsMessage, False),
    "Offline": (pb.GrpsMessage, pb.GrpsMessage, False),
    "CheckLiveness": (pb.GrpsMessage, pb.GrpsMessage, False),
    "CheckReadiness": (pb.GrpsMessage, pb.GrpsMessage, False),
    "ServerMetadata": (pb.GrpsMessage, pb.GrpsMessage, False),
    "ModelMetadata": (pb.GrpsMessage, pb.GrpsMessage, False),
}


async def _payload(request: Any) -> convert.Payload:
    """The request's tensors: converted on the request-work threads when they hold many values."""
    try:
        return convert.payload_from_message(request, inline=True)
    except LargeWork:
        return await run_request_work(convert.payload_from_message, request)
