"""grps over REST, under /grps/v1/: each route a few lines over GrpsApi.

Every reply carries the grps status, and the HTTP status equals ``status.code``; the one
exception is a bin_data answer, sent as raw bytes with 200.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import parse_qs

from rosettaserve.core.errors import InvalidInput, MethodNotAllowed, NotFound, ServingError
from rosettaserve.core.executor import run_sized
from rosettaserve.core.types import InferenceResponse
from rosettaserve.observability import status_page
from rosettaserve.observability.trend import NAMES, Trend
from rosettaserve.protocols.grps import convert, jsonwire
from rosettaserve.protocols.grps.api import GrpsApi, failure_for
from rosettaserve.web.routing import Handler, HttpRequest, HttpResponse, Route, json_response

PREFIX = "/grps/v1/"
PROTOCOL = "grps_rest"  # the metrics label
STREAM_CONTENT_TYPE = "application/x-ndjson"  # one GrpsMessage per line, one line per chunk


def reply(msg: Any, headers: dict[str, str] | None = None) -> HttpResponse:
    return HttpResponse(msg.status.code, jsonwire.encode(msg), jsonwire.JSON, headers or {})


def render_error(exc: ServingError) -> HttpResponse:
    return reply(convert.error_message(exc), exc.headers)


def _query(req: HttpRequest) -> dict[str, str]:
    try:
        pairs = parse_qs(req.query.decode(), keep_blank_values=True, strict_parsing=False)
    except UnicodeDecodeError:
        raise InvalidInput("the query string is not UTF-8") from None
    return {key: values[-1] for key, values in pairs.items()}


def _flag(query: dict[str, str], key: str) -> bool:
    return query.get(key, "").lower() == "true"


def routes(api: GrpsApi) -> list[Route]:
    async def live(req: HttpRequest) -> HttpResponse:
        return reply(convert.ok())

    async def ready(req: HttpRequest) -> HttpResponse:
        return reply(api.readiness())

    async def online(req: HttpRequest) -> HttpResponse:
        api.set_online(True)
        return reply(convert.ok())

    async def offline(req: HttpRequest) -> HttpResponse:
        api.set_online(False)
        return reply(convert.ok())

    async def server_metadata(req: HttpRequest) -> HttpResponse:
        return reply(convert.ok(str_data=api.server_metadata()))

    async def model_metadata(req: HttpRequest) -> HttpResponse:
        msg = jsonwire.parse_message(req.header("content-type"), req.body, allow_empty=True)
        return reply(convert.ok(str_data=api.model_metadata(msg, _query(req).get("model", ""))))

    async def predict(req: HttpRequest) -> HttpResponse:
        return await _predict(api, req)

    async def predict_by_get(req: HttpRequest) -> HttpResponse:
        raise MethodNotAllowed("infer/predict takes POST", headers={"allow": "POST"})

    async def unknown(req: HttpRequest) -> HttpResponse:
        raise NotFound(f"Not Found: no grps route {req.path}")

    either = ("GET", "POST")
    table: list[tuple[str, Handler, tuple[str, ...]]] = [
        ("health/live", live, either),
        ("health/ready", ready, either),
        ("health/online", online, either),
        ("health/offline", offline, either),
        ("metadata/server", server_metadata, either),
        ("metadata/model", model_metadata, either),
        ("infer/predict", predict, ("POST",)),
        ("infer/predict", predict_by_get, ("GET",)),
        (".*", unknown, either),  # grps-shaped 404s under the prefix
    ]
    return [
        Route(method, PREFIX + path, handler, render_error)
        for path, handler, methods in table
        for method in methods
    ]


def monitor_routes(trend: Trend) -> list[Route]:
    """grps's monitor: its web page at ``/grps/v1/monitor/metrics`` (the server's status page,
    also at ``/``) and ``/grps/v1/monitor/series?name=<metric>`` in grps's series shape."""

    async def page(req: HttpRequest) -> HttpResponse:
        trend.start()
        return status_page.page_response()

    async def series(req: HttpRequest) -> HttpResponse:
        trend.start()
        name = _query(req).get("name", "")
        doc = trend.series(name)
        if doc is None:
            known = ", ".join(NAMES)
            raise NotFound(f"key not found: {name!r} (the metrics are {known})")
        return json_response(doc)

    return [
        Route("GET", PREFIX + "monitor/metrics", page, render_error),
        Route("GET", PREFIX + "monitor/series", series, render_error),
    ]


async def _predict(api: GrpsApi, req: HttpRequest) -> HttpResponse:
    query = _query(req)
    streaming, ndarray = _flag(query, "streaming"), _flag(query, "return-ndarray")
    if streaming and ndarray:
        raise InvalidInput("streaming and return-ndarray cannot be used together")
    # a large body is read on the request-work threads (protobuf's JSON reader: Python work
    # per value)
    payload = await run_sized(
        len(req.body), jsonwire.parse_predict, req.header("content-type"), req.body
    )
    model = query.get("model", "")
    if streaming:
        return await _stream(api.infer_stream(payload, model, PROTOCOL), payload.form)
    response = await api.infer(payload, model, PROTOCOL)
    if ndarray:
        return HttpResponse(200, jsonwire.encode_ndarray(response), jsonwire.JSON)
    body, content_type = jsonwire.encode_any(response, payload.form)
    return HttpResponse(200, body, content_type)


async def _stream(responses: AsyncIterator[InferenceResponse], form: str) -> HttpResponse:
    """Chunked, one JSON line per message. What fails before the first message keeps its
    HTTP status; what fails later ends the stream with a FAILURE line."""
    try:
        first: InferenceResponse | None = await anext(responses)
    except StopAsyncIteration:
        first = None
    lines = _lines(first, responses, form)
    return HttpResponse(200, content_type=STREAM_CONTENT_TYPE, stream=lines)


async def _lines(
    first: InferenceResponse | None, rest: AsyncIterator[InferenceResponse], form: str
) -> AsyncIterator[bytes]:
    try:
        if first is None:
            return
        yield jsonwire.stream_line(convert.to_message(first, form))
        async for response in rest:
            yield jsonwire.stream_line(convert.to_message(response, form))
    except Exception as exc:
        yield jsonwire.stream_line(failure_for(exc))
