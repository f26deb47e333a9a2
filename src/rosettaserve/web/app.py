"""The HTTP application: routes of every enabled REST protocol, errors in each route's own shape."""

from __future__ import annotations

import logging
from typing import Any, Protocol
from urllib.parse import unquote

import httptools

from rosettaserve.core import share
from rosettaserve.core.errors import InvalidInput, ServingError
from rosettaserve.web.content_coding import compressed, inflate
from rosettaserve.web.keys import KeyCheck
from rosettaserve.web.routing import (
    HttpRequest,
    HttpResponse,
    Route,
    Router,
    error_body,
    json_response,
)

log = logging.getLogger("rosettaserve.http")


# Routed URLs remembered: clients repeat a few (a model's infer URL), and a lookup costs less than
# splitting and matching again. Only short URLs, and the memory is dropped when full.
MAX_ROUTED, MAX_ROUTED_URL = 1024, 256
DEFAULT_MAX_INFLATED = 256 * 1024 * 1024  # the server sets its --max-request-size

Routed = tuple[str, bytes, Route, dict[str, str]]  # path, query, route, path parameters


class App(Protocol):
    """What an HTTP server answers with: ``HttpApp``, or an app around it (request ids, the
    access log, CORS, spans: rosettaserve.observability)."""

    async def respond(
        self, method: str, raw_url: bytes, headers: dict[str, str], body: bytes | bytearray
    ) -> HttpResponse: ...


class HttpApp:
    def __init__(self, routes: list[Route]) -> None:
        self.router = Router(routes)
        self._routed: dict[tuple[str, bytes], Routed] = {}
        self.guard: KeyCheck | None = None  # set: requests need an API key (security.keys)
        self.max_inflated = DEFAULT_MAX_INFLATED  # a compressed body inflates to this at most

    async def respond(
        self, method: str, raw_url: bytes, headers: dict[str, str], body: bytes | bytearray
    ) -> HttpResponse:
        """Route and answer one request; never raises."""
        routed = self._routed.get((method, raw_url))
        if routed is None:
            try:
                routed = self._route(method, raw_url)
            except ServingError as exc:
                return error_body(exc)
        path, query, route, params = routed
        tenant = None
        if self.guard is not None:  # API keys: rosettaserve.security
            # the key check asks about the route that runs: HEAD runs GET's, open where it is
            tenant = self.guard.admits_http(route.method, route.pattern, headers)
            if tenant is None:
                return route.on_error(self.guard.refusal())
        try:
            if tenant is not None or share.HEADER in headers:  # its queues' order (core/share)
                _shared(tenant, headers.get(share.HEADER))
            if "content-encoding" in headers:  # gzip or deflate (web.content_coding)
                body = await inflate(headers["content-encoding"], body, self.max_inflated)
            # HEAD runs the GET route as GET (the transport sends the head alone)
            request = HttpRequest(route.method, path, query, headers, body, params=dict(params))
            response = await route.handler(request)
            if "accept-encoding" in headers:  # gzip or deflate over 1 KiB (content_coding)
                return compressed(response, headers["accept-encoding"])
            return response
        except ServingError as exc:
            return route.on_error(exc)
        except Exception:
            log.exception("unhandled error on %s %s", method, path)
            return json_response({"error": "internal server error (see the server log)"}, 500)

    def _route(self, method: str, raw_url: bytes) -> Routed:
        """Split and match a URL, and remember the answer (routes never change while serving)."""
        self.router.check_method(method)
        path, query = split_url(raw_url)
        route, params = self.router.match(method, path)
        routed = (path, query, route, params)
        if len(raw_url) <= MAX_ROUTED_URL:
            if len(self._routed) >= MAX_ROUTED:
                self._routed.clear()
            self._routed[method, raw_url] = routed
        return routed


def _shared(tenant: share.Share | None, header: str | None) -> None:
    """The request's tenant and priority, for the queues it waits in (each request is answered
    in a context of its own, or, pipelined, after the server reset it: transport/h1_answers)."""
    found = share.edge(tenant, header)
    if found is not None:
        share.SHARE.set(found)


def split_url(raw_url: bytes) -> tuple[str, bytes]:
    if raw_url.startswith(b"/") and b"?" not in raw_url and b"%" not in raw_url:
        return raw_url.decode("latin-1"), b""  # the common case, without parsing
    try:
        url: Any = httptools.parse_url(raw_url)  # path and query may be None (stubs: bytes)
    except httptools.HttpParserInvalidURLError:
        raise InvalidInput(f"malformed request URL {raw_url[:200]!r}") from None
    path = unquote((url.path or b"/").decode("latin-1"))
    return path, url.query or b""
