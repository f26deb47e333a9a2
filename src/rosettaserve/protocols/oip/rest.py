"""Open Inference Protocol over REST: routes, each a few lines over the data plane."""

from __future__ import annotations

from collections.abc import Sequence
from time import perf_counter_ns
from typing import Any

from rosettaserve.core.dataplane import DataPlane
from rosettaserve.core.errors import InvalidInput, Unsupported
from rosettaserve.core.executor import LargeWork, run_request_work
from rosettaserve.protocols.oip import answer_tier, convert, requested, shared_memory
from rosettaserve.protocols.oip import extensions as ext
from rosettaserve.protocols.oip.raw_request import is_raw, raw_request
from rosettaserve.web.routing import HttpRequest, HttpResponse, Route, json_response

MODEL = r"/v2/models/(?P<model>[^/]+)(?:/versions/(?P<version>[0-9]+))?"
REPO_MODEL = r"/v2/repository/models/(?P<model>[^/]+)"
BASE_EXTENSIONS = [
    "binary_tensor_data",
    "parameters",
    "model_configuration",
    "statistics",
    "sequence",
    "sequence(string_id)",
    "classification",
    "logging",
    "trace",
]


def extensions(model_control: bool, shared_memory: bool = False) -> list[str]:
    """``shared_memory``: whether clients may register regions (--allow-client-shm, one worker
    process)."""
    return (
        BASE_EXTENSIONS
        + (["model_repository"] if model_control else [])
        + (["system_shared_memory"] if shared_memory else [])
    )


def _version(req: HttpRequest) -> str:
    return req.params.get("version", "")


def optional_json(req: HttpRequest) -> dict[str, Any]:
    if not req.body.strip():
        return {}
    doc = convert.parse_json(req.body)
    if not isinstance(doc, dict):
        raise InvalidInput("the request body must be a JSON object")
    return doc


def health_routes(dp: DataPlane) -> list[Route]:
    async def live(req: HttpRequest) -> HttpResponse:
        return json_response({"live": True})

    async def ready(req: HttpRequest) -> HttpResponse:
        is_ready = dp.ready()
        return json_response({"ready": is_ready}, 200 if is_ready else 503)

    async def model_ready(req: HttpRequest) -> HttpResponse:
        mv = dp.resolve(req.params["model"], _version(req))
        doc = {"name": mv.name, "ready": mv.ready}
        if mv.reason:
            doc["error"] = mv.reason
        return json_response(doc, 200 if mv.ready else 503)

    return [
        Route("GET", "/v2/health/live", live),
        Route("GET", "/v2/health/ready", ready),
        Route("GET", MODEL + "/ready", model_ready),
    ]


def metadata_routes(dp: DataPlane) -> list[Route]:
    async def server_metadata(req: HttpRequest) -> HttpResponse:
        info = dp.info
        return json_response(
            {"name": info.name, "version": info.version, "extensions": info.extensions}
        )

    async def model_metadata(req: HttpRequest) -> HttpResponse:
        name = req.params["model"]
        mv = dp.resolve(name, _version(req))
        return json_response(convert.model_metadata(mv, dp.model_versions(name)))

    async def model_config(req: HttpRequest) -> HttpResponse:
        return json_response(ext.model_config(dp.resolve(req.params["model"], _version(req))))

    async def statistics(req: HttpRequest) -> HttpResponse:
        versions = dp.select_versions(req.params.get("model", ""), _version(req))
        return json_response({"model_stats": [ext.model_statistics(v) for v in versions]})

    return [
        Route("GET", "/v2", server_metadata),
        Route("GET", "/v2/", server_metadata),
        Route("GET", "/v2/models/stats", statistics),
        Route("GET", MODEL, model_metadata),
        Route("GET", MODEL + "/config", model_config),
        Route("GET", MODEL + "/stats", statistics),
    ]


def infer_routes(dp: DataPlane) -> list[Route]:
    async def infer(req: HttpRequest) -> HttpResponse:
        raw, header = req.body, req.header(convert.HEADER_LENGTH)
        model, version = req.params["model"], _version(req)
        found = None
        if dp.answers_cached:  # (a server without a response cache never looks)
            start = perf_counter_ns()
            found = answer_tier.slot(dp, "oip_rest", (model, version), header, raw)
            if found is not None:
                kept = answer_tier.hit(dp, found, start)
                if kept is not None:
                    return _answer(*kept)
        try:
            if is_raw(header):
                request = raw_request(raw, dp.resolve(model, version))
            else:
                request = convert.parse_infer(raw, header, model, version, True)
        except LargeWork:  # a BYTES tensor too large to decode on the event loop
            parse = convert.parse_infer
            request = await run_request_work(parse, raw, header, model, version, False)
        response = await dp.infer(request)
        if convert.answered_by_extensions(request):
            requested.answer(dp, request, response)
        try:
            body, blobs, header_length = convert.encode_infer(response, request, True)
        except LargeWork:  # a BYTES output too large to encode on the event loop
            encode = convert.encode_infer
            body, blobs, header_length = await run_request_work(encode, response, request)
        if found is not None:
            found.keep(body, blobs, header_length)
        return _answer(body, blobs, header_length)

    return [Route("POST", MODEL + "/infer", infer)]


def _answer(body: bytes, blobs: Sequence[Any], header_length: int | None) -> HttpResponse:
    if header_length is None:
        return HttpResponse(200, body)
    headers = {convert.HEADER_LENGTH: str(header_length)}
    return HttpResponse(200, body, "application/octet-stream", headers, tail=tuple(blobs))


def repository_routes(dp: DataPlane) -> list[Route]:
    async def index(req: HttpRequest) -> HttpResponse:
        ready = optional_json(req).get("ready", False)
        if not isinstance(ready, bool):
            raise InvalidInput("Invalid value for 'ready': expected a boolean")
        rows = dp.repository_index(ready)
        return json_response(
            [
                {"name": r.name, "state": r.state, "reason": r.reason}
                | ({"version": r.version, "resident_bytes": r.resident_bytes} if r.version else {})
                | ({"asleep": True} if r.asleep else {})  # UNLOADED, its model kept asleep
                for r in rows
            ]
        )

    async def load(req: HttpRequest) -> HttpResponse:
        params = optional_json(req).get("parameters") or {}
        if not isinstance(params, dict):
            raise InvalidInput("'parameters' must be a JSON object")
        ext.refuse_load_parameters(params)
        await dp.load_model(req.params["model"])
        return HttpResponse(200, b"")

    async def unload(req: HttpRequest) -> HttpResponse:
        optional_json(req)
        await dp.unload_model(req.params["model"])
        return HttpResponse(200, b"")

    return [
        Route("POST", "/v2/repository/index", index),
        Route("POST", REPO_MODEL + "/load", load),
        Route("POST", REPO_MODEL + "/unload", unload),
    ]


SYSTEM_SHM = r"/v2/systemsharedmemory(?:/region/(?P<region>[^/]+))?"
CUDA_SHM = r"/v2/cudasharedmemory(?:/region/(?P<region>[^/]+))?"
CUDA_REFUSAL = "CUDA shared memory is not supported: this server has no GPU support"


def _register_field(doc: dict[str, Any], key: str, required: bool) -> Any:
    """A field of a register request: 'key' a string, 'offset' and 'byte_size' counts."""
    if key not in doc:
        if required:
            raise InvalidInput(f"Shared memory register request has no '{key}' field")
        return 0
    value = doc[key]
    if key == "key":
        if not isinstance(value, str):
            raise InvalidInput("Shared memory register request: 'key' must be a string")
    elif type(value) is not int or value < 0:
        raise InvalidInput(
            f"Shared memory register request: '{key}' must be a non-negative integer"
        )
    return value


def shared_memory_routes() -> list[Route]:
    """Triton's system shared memory extension; its CUDA one answers that there is no GPU."""
    regions = shared_memory.REGIONS

    async def status(req: HttpRequest) -> HttpResponse:
        return json_response(regions.status(req.params.get("region") or ""))

    async def register(req: HttpRequest) -> HttpResponse:
        doc = optional_json(req)
        key = _register_field(doc, "key", True)
        offset = _register_field(doc, "offset", False)
        size = _register_field(doc, "byte_size", True)
        regions.register(req.params["region"], key, offset, size)
        return HttpResponse(200, b"")

    async def unregister(req: HttpRequest) -> HttpResponse:
        regions.unregister(req.params.get("region") or "")
        return HttpResponse(200, b"")

    async def cuda(req: HttpRequest) -> HttpResponse:
        if req.path.endswith("/status") and not req.params.get("region"):
            return json_response([])  # none registered: there can be none
        if req.path.endswith("/unregister"):  # nothing to unregister: Triton's 200 (a client
            return HttpResponse(200, b"")  # such as perf_analyzer unregisters all at its end)
        raise Unsupported(CUDA_REFUSAL)

    return [
        Route("GET", SYSTEM_SHM + "/status", status),
        Route("POST", r"/v2/systemsharedmemory/region/(?P<region>[^/]+)/register", register),
        Route("POST", SYSTEM_SHM + "/unregister", unregister),
        Route("GET", CUDA_SHM + "/status", cuda),
        Route("POST", r"/v2/cudasharedmemory/region/(?P<region>[^/]+)/register", cuda),
        Route("POST", CUDA_SHM + "/unregister", cuda),
    ]


def routes(dp: DataPlane) -> list[Route]:
    return (
        health_routes(dp)
        + metadata_routes(dp)
        + infer_routes(dp)
        + repository_routes(dp)
        + shared_memory_routes()
    )
