"""The status page: ``GET /`` (HTML, CSS and JS from the package) and ``GET /status.json``.

The page polls ``/status.json`` (observability.status_doc: built from the snapshots /metrics
renders) and draws its charts itself; nothing is fetched from elsewhere. The same page answers
at grps's ``/grps/v1/monitor/metrics`` (see observability.trend for grps's series endpoint).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from functools import cache
from importlib import resources
from typing import Any

from rosettaserve.observability.status_doc import ServerFacts
from rosettaserve.web.routing import (
    Handler,
    HttpRequest,
    HttpResponse,
    Route,
    json_response,
)

PAGE = "/"
DOCUMENT = "/status.json"
ASSETS = {  # path -> (file in static/, content type)
    PAGE: ("index.html", "text/html; charset=utf-8"),
    "/status/app.js": ("app.js", "text/javascript; charset=utf-8"),
    "/status/style.css": ("style.css", "text/css; charset=utf-8"),
}
# The page runs only its own script and style, and talks only to this server.
PAGE_HEADERS = {
    "content-security-policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
        "img-src 'self' data:; base-uri 'none'; frame-ancestors 'none'; form-action 'none'"
    ),
    "x-content-type-options": "nosniff",
    "cache-control": "no-cache",
}

StatusSource = Callable[[], Awaitable[dict[str, Any]]]


@cache
def asset(name: str) -> bytes:
    return resources.files("rosettaserve.observability").joinpath("static", name).read_bytes()


def page_response() -> HttpResponse:
    name, content_type = ASSETS[PAGE]
    return HttpResponse(200, asset(name), content_type, dict(PAGE_HEADERS))


def routes(source: StatusSource) -> list[Route]:
    """The page, its two assets and the JSON it polls."""

    def serve(name: str, content_type: str) -> Handler:
        async def handler(req: HttpRequest) -> HttpResponse:
            return HttpResponse(200, asset(name), content_type, dict(PAGE_HEADERS))

        return handler

    async def status(req: HttpRequest) -> HttpResponse:
        return json_response(await source(), headers={"cache-control": "no-store"})

    return [
        *(Route("GET", path, serve(*file)) for path, file in ASSETS.items()),
        Route("GET", DOCUMENT, status),
    ]


PROTOCOLS = (  # name, endpoint ("http", "grpc", "metrics"), paths or service
    ("KServe V2 / OIP (REST)", "http", "/v2/..."),
    ("TensorFlow Serving (REST)", "http", "/v1/models/..."),
    ("grps (REST)", "http", "/grps/v1/..."),
    ("OpenAI", "http", "/v1/chat/completions, /v1/completions, /v1/models"),
    ("OpenAI Responses", "http", "/v1/responses, /v1/responses/{id}"),
    ("Anthropic Messages", "http", "/v1/messages, /v1/messages/count_tokens"),
    ("TGI and vLLM", "http", "/generate, /generate_stream"),
    ("Triton generate", "http", "/v2/models/{model}/generate"),
    ("MindIE", "http", "/infer, /infer_token"),
    ("Ollama", "http", "/api/generate, /api/chat, /api/embed, /api/tags, /api/show, ..."),
    ("Prefill/decode instance status", "http", "/v1/status"),
    ("Status page", "http", "/, /status.json; grps: /grps/v1/monitor/metrics, .../series"),
    ("Prometheus metrics", "metrics", "/metrics"),
    ("KServe V2 / OIP (gRPC)", "grpc", "inference.GRPCInferenceService"),
    ("grps (gRPC)", "grpc", "grps.protos.v1.GrpsService"),
    (
        "TensorFlow Serving (gRPC)",
        "grpc",
        "tensorflow.serving.PredictionService, tensorflow.serving.ModelService",
    ),
    ("gRPC health", "grpc", "grpc.health.v1.Health"),
)


def server_facts(version: str, role: str, workers: int, endpoints: dict[str, str]) -> ServerFacts:
    """``endpoints``: "http", "grpc" and "metrics", each where it answers."""
    rows = [{"name": n, "endpoint": e, "path": p} for n, e, p in PROTOCOLS]
    return ServerFacts("rosettaserve", version, role, workers, endpoints, rows)
