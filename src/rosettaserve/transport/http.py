"""The HTTP application: routes of every enabled REST protocol, errors in each route's own shape."""

from __future__ import annotations

import logging
from urllib.parse import unquote

import httptools

from rosettaserve.core.errors import InvalidInput, ServingError
from rosettaserve.transport.routing import (
    HttpRequest,
    HttpResponse,
    Route,
    Router,
    error_body,
    json_response,
)

log = logging.getLogger("rosettaserve.http")


class HttpApp:
    def __init__(self, routes: list[Route]) -> None:
        self.router = Router(routes)

    async def respond(
        self, method: str, raw_url: bytes, headers: dict[str, str], body: bytes
    ) -> HttpResponse:
        """Route and answer one request; never raises."""
        try:
            path, query = split_url(raw_url)
            route, params = self.router.match(method, path)
        except ServingError as exc:
            return error_body(exc)
        try:
            return await route.handler(HttpRequest(method, path, query, headers, body, params))
        except ServingError as exc:
            return route.on_error(exc)
        except Exception:
            log.exception("unhandled error on %s %s", method, path)
            return json_response({"error": "internal server error (see the server log)"}, 500)


def split_url(raw_url: bytes) -> tuple[str, bytes]:
    if raw_url.startswith(b"/") and b"?" not in raw_url and b"%" not in raw_url:
        return raw_url.decode("latin-1"), b""  # the common case, without parsing
    try:
        url = httptools.parse_url(raw_url)
    except httptools.HttpParserInvalidURLError:
        raise InvalidInput(f"malformed request URL {raw_url[:200]!r}") from None
    path = unquote((url.path or b"/").decode("latin-1"))
    return path, url.query or b""
