"""Open Inference Protocol over REST: routes, each a few lines over the data plane."""

from __future__ import annotations

from rosettaserve.core.dataplane import DataPlane
from rosettaserve.protocols.oip import convert
from rosettaserve.transport.routing import HttpRequest, HttpResponse, Route, json_response

MODEL = r"/v2/models/(?P<model>[^/]+)(?:/versions/(?P<version>[0-9]+))?"
EXTENSIONS = ["binary_tensor_data", "parameters"]


def routes(dp: DataPlane) -> list[Route]:
    async def live(req: HttpRequest) -> HttpResponse:
        return json_response({"live": True})

    async def ready(req: HttpRequest) -> HttpResponse:
        is_ready = dp.ready()
        return json_response({"ready": is_ready}, 200 if is_ready else 503)

    async def server_metadata(req: HttpRequest) -> HttpResponse:
        info = dp.info
        return json_response(
            {"name": info.name, "version": info.version, "extensions": info.extensions}
        )

    async def model_metadata(req: HttpRequest) -> HttpResponse:
        name = req.params["model"]
        mv = dp.resolve(name, req.params.get("version", ""))
        return json_response(convert.model_metadata(mv, dp.model_versions(name)))

    async def model_ready(req: HttpRequest) -> HttpResponse:
        mv = dp.resolve(req.params["model"], req.params.get("version", ""))
        doc = {"name": mv.name, "ready": mv.ready}
        if mv.reason:
            doc["error"] = mv.reason
        return json_response(doc, 200 if mv.ready else 503)

    async def infer(req: HttpRequest) -> HttpResponse:
        request = convert.parse_infer(
            req.body,
            req.header(convert.HEADER_LENGTH),
            req.params["model"],
            req.params.get("version", ""),
        )
        response = await dp.infer(request)
        body, header_length = convert.encode_infer(response, request)
        if header_length is None:
            return HttpResponse(200, body)
        return HttpResponse(
            200,
            body,
            "application/octet-stream",
            {"inference-header-content-length": str(header_length)},
        )

    return [
        Route("GET", "/v2/health/live", live),
        Route("GET", "/v2/health/ready", ready),
        Route("GET", "/v2", server_metadata),
        Route("GET", "/v2/", server_metadata),
        Route("GET", MODEL, model_metadata),
        Route("GET", MODEL + "/ready", model_ready),
        Route("POST", MODEL + "/infer", infer),
    ]
