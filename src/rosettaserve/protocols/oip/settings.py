"""Triton's logging and trace extensions over REST and gRPC (``/v2/logging``, ``LogSettings``;
``/v2[/models/{m}]/trace/setting``, ``TraceSetting``): a few lines each over
``observability.log_settings`` and ``observability.trace_settings``, one document for both."""

from __future__ import annotations

from typing import Any

from rosettaserve.core.dataplane import DataPlane
from rosettaserve.observability.log_settings import LogSettings
from rosettaserve.observability.trace_settings import TraceSettings
from rosettaserve.protocols.oip.pb import grpc_service_pb2 as pb
from rosettaserve.protocols.oip.rest import MODEL, optional_json
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
    if "log_file" in given:  # named at all, even without a value: refused, as Triton does
        given["log_file"] = given["log_file"] or ""
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


def trace_routes(dp: DataPlane, traces: TraceSettings) -> list[Route]:
    def model(req: HttpRequest) -> str:
        name = req.params.get("model", "")
        if name:
            dp.resolve(name)  # an unknown model: 404, its settings never made
        return name

    async def read(req: HttpRequest) -> HttpResponse:
        return json_response(traces.document(model(req)))

    async def update(req: HttpRequest) -> HttpResponse:
        return json_response(traces.update(model(req), optional_json(req)))

    return [
        Route(method, path, handler)
        for path in ("/v2/trace/setting", MODEL + "/trace/setting")
        for method, handler in (("GET", read), ("POST", update))
    ]


def trace_setting(dp: DataPlane, traces: TraceSettings, request: Any) -> Any:
    """gRPC ``TraceSetting``: no settings read them; a setting with no value goes back to the
    server's (JSON's null)."""
    if request.model_name:
        dp.resolve(request.model_name)
    given = {name: list(v.value) or None for name, v in request.settings.items()}
    answer = traces.update(request.model_name, given) if given else None
    reply = pb.TraceSettingResponse()
    for name, value in (answer or traces.document(request.model_name)).items():
        reply.settings[name].value.extend(value if isinstance(value, list) else [value])
    return reply
