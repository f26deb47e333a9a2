"""Triton's logging extension over REST and gRPC (``/v2/logging``, ``LogSettings``): a few lines
each over ``observability.log_settings``, one settings document for both."""

from __future__ import annotations

from typing import Any

from rosettaserve.observability.log_settings import LogSettings
from rosettaserve.protocols.oip.pb import grpc_service_pb2 as pb
from rosettaserve.protocols.oip.rest import optional_json
from rosettaserve.web.routing import HttpRequest, HttpResponse, Route, json_response


def logging_routes(logs: LogSettings) -> list[Route]:
    async def read(req: HttpRequest) -> HttpResponse:
        return json_response(logs.document())

    async def update(req: HttpRequest) -> HttpResponse:
        return json_response(logs.update(optional_json(req)))

    return [Route("GET", "/v2/logging", read), Route("POST", "/v2/logging", update)]


def log_settings(logs: LogSettings, request: Any) -> Any:
    """gRPC ``LogSettings``: the settings a request sets (each value its oneof's), applied."""
    given: dict[str, Any] = {}
    for name, value in request.settings.items():
        choice = value.WhichOneof("parameter_choice")
        given[name] = None if choice is None else getattr(value, choice)
    reply = pb.LogSettingsResponse()
    for name, value in logs.update(given).items():
        slot = reply.settings[name]
        if isinstance(value, bool):
            slot.bool_param = value
        elif isinstance(value, int):
            slot.uint32_param = value
        else:
            slot.string_param = value
    return reply
