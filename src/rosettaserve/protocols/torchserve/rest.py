"""TorchServe's inference API on the HTTP port: ``GET /ping``, ``POST /predictions/{model}``.

A request reaches the handler as TorchServe's frontend passes it on: the body as the parameter
``body`` with the request's media type (without its parameters, so ``application/json;
charset=utf-8`` is ``application/json``), or one parameter per field of a form; every request
header (lower-case names here: our HTTP layer folds them), with ``url_path`` (path segments past
the version) and ``explain`` (``False``) added as TorchServe adds them. The answer carries the
status, content type and headers the handler set; a streamed one goes out in chunks as sent.
Errors are TorchServe's ``{"code", "type", "message"}``, pretty-printed as its frontend prints.
"""

from __future__ import annotations

import email.errors
import email.parser
import email.policy
import json
from collections.abc import AsyncIterator
from time import perf_counter_ns
from typing import Any
from urllib.parse import parse_qsl

from rosettaserve.core.call import Call
from rosettaserve.core.dataplane import DataPlane
from rosettaserve.core.errors import ServingError
from rosettaserve.core.registry import ModelVersion, VersionState
from rosettaserve.protocols.torchserve.wire import (
    HandlerFailed,
    Parameter,
    TsRequest,
    TsServable,
    default_version,
    servable,
)
from rosettaserve.web.routing import HttpRequest, HttpResponse, Route

PROTOCOL = "torchserve"  # the protocol label of its requests in the metrics
PREDICT = r"/predictions/(?P<model>[^/]+)(?:/(?P<version>[^/]+)(?:/(?P<rest>.*))?)?"
_FORM = "application/x-www-form-urlencoded"
# TorchServe's exception class names, by our error's status (what its frontend answers)
_TYPES = {
    400: "BadRequestException",
    404: "ModelNotFoundException",
    405: "MethodNotAllowedException",
    413: "RequestEntityTooLarge",
    503: "ServiceUnavailableException",
}


def pretty(doc: Any, status: int = 200) -> HttpResponse:
    """JSON as TorchServe's frontend writes it: indented by two, a newline at the end."""
    return HttpResponse(status, json.dumps(doc, indent=2).encode() + b"\n")


def error(status: int, kind: str, message: str) -> HttpResponse:
    return pretty({"code": status, "type": kind, "message": message}, status)


def render_error(exc: ServingError) -> HttpResponse:
    status = exc.http_status
    response = error(status, _TYPES.get(status, "InternalServerException"), exc.message)
    response.headers.update(exc.headers)
    return response


def routes(dp: DataPlane, defaults: dict[str, str]) -> list[Route]:
    """``defaults``: the versions ``set-default`` chose, by model (shared with management)."""

    async def ping(req: HttpRequest) -> HttpResponse:
        """As TorchServe counts working workers: every loaded version ready, Healthy (200);
        some, Partial Healthy; none, Unhealthy (500). A version still loading or failed to
        load has no workers to count (TorchServe is healthy while its models load)."""
        loaded = [
            mv.ready
            for name in dp.registry.model_names()
            for mv in dp.registry.versions(name) or []
            if mv.model is not None
        ]
        if all(loaded):
            return pretty({"status": "Healthy"})
        return pretty({"status": "Partial Healthy" if any(loaded) else "Unhealthy"}, 500)

    async def predict(req: HttpRequest) -> HttpResponse:
        name, version = req.params["model"], req.params.get("version")
        mv = await _servable(dp, name, version, defaults)
        if isinstance(mv, HttpResponse):
            return mv
        model: TsServable = mv.model  # type: ignore[assignment]  # (checked by _servable)
        call = Call(perf_counter_ns())
        call.submitted = call.start
        with mv.in_use():
            try:
                answer = await model.serve(ts_request(req))
            except HandlerFailed as exc:
                _count(dp, mv, call, "internal")
                return error(exc.code, "InternalServerException", exc.message)
        _count(dp, mv, call, "success")
        headers = {k: v for k, v in answer.headers.items() if k.lower() != "content-type"}
        if answer.stream is None:
            return HttpResponse(answer.status, answer.body, answer.content_type, headers)
        return HttpResponse(
            answer.status,
            content_type=answer.content_type,
            headers=headers,
            stream=_chunks(answer.body, answer.stream),
        )

    return [
        Route("GET", "/ping", ping, render_error),
        Route("POST", PREDICT, predict, render_error),
        Route("PUT", PREDICT, predict, render_error),  # TorchServe's frontend takes any method
    ]


async def _servable(
    dp: DataPlane, name: str, version: str | None, defaults: dict[str, str]
) -> ModelVersion | HttpResponse:
    """The version a prediction goes to (one that loads on demand loaded first: the request
    waits, as on every other protocol), or TorchServe's 404 for it."""
    versions = [v for v in dp.registry.versions(name) or [] if _handler_version(v)]
    if not versions:
        return error(404, "ModelNotFoundException", f"Model not found: {name}")
    if version is None:
        mv = default_version([v for v in versions if v.ready] or versions, defaults)
    else:
        found = next((v for v in versions if v.version == version), None)
        if found is None:
            message = f"Model version: {version} does not exist for model: {name}"
            return error(404, "ModelVersionNotFoundException", message)
        mv = found
    if not mv.ready:
        mv = await dp.wake(name, mv)  # (not loadable: its error, e.g. 503 while it loads)
    return mv


def _handler_version(mv: ModelVersion) -> bool:
    """A version TorchServe's API serves: a handler's, loaded or loading on its next request
    (one that failed to load is not registered, for TorchServe: its 404)."""
    if mv.state is VersionState.UNLOADED or mv.state is VersionState.LOADING:
        return mv.runtime == "torchserve"
    return mv.ready and servable(mv.model)


def _count(dp: DataPlane, mv: ModelVersion, call: Call, outcome: str) -> None:
    """The model's statistics and metrics count these requests as every protocol's."""
    end = perf_counter_ns()
    if outcome == "success":
        mv.stats.record_success(1, call, end)
    else:
        mv.stats.record_failure(call.start)
    if dp.observer is not None:
        dp.observer.observe(mv, PROTOCOL, outcome, call, end)


def ts_request(req: HttpRequest) -> TsRequest:
    headers = dict(req.headers)
    headers["url_path"] = req.params.get("rest", "")
    headers["explain"] = "False"
    media = (req.headers.get("content-type") or "").partition(";")[0].strip().lower()
    body = bytes(req.body)
    if media == _FORM:
        fields = parse_qsl(body.decode("utf-8", "replace"), keep_blank_values=True)
        parameters = [Parameter(k, "", v.encode()) for k, v in fields]
    elif media.startswith("multipart/"):
        parameters = _multipart(req.headers.get("content-type", ""), body)
    else:
        parameters = [Parameter("body", media, body)]
    return TsRequest(parameters, headers)


def _multipart(content_type: str, body: bytes) -> list[Parameter]:
    """A form's fields: files with their own media type, plain fields with none."""
    head = f"Content-Type: {content_type}\r\n\r\n".encode()
    message = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(head + body)
    parameters = []
    for part in message.iter_parts():
        payload = part.get_payload(decode=True)
        payload = payload if isinstance(payload, bytes) else b""
        try:
            name = part.get_param("name", header="content-disposition") or ""
            media = part.get_content_type() if part.get_filename() is not None else ""
        except (IndexError, ValueError, email.errors.MessageError):
            # the standard library's header parser fails on some malformed parameters (a
            # "nam*" with nothing after it): such a part is kept, unnamed and untyped, as the
            # parser keeps its other defects, rather than failing the request with a 500
            name, media = "", ""
        parameters.append(Parameter(str(name), media, payload))
    return parameters


async def _chunks(first: bytes, rest: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    if first:
        yield first
    async for chunk in rest:
        yield chunk
