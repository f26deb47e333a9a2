"""The HTTP transport: one ASGI app serving the routes of every enabled REST protocol."""

from __future__ import annotations

import logging
from typing import Any

from rosettaserve.core.errors import PayloadTooLarge, ServingError
from rosettaserve.transport.routing import (
    HttpRequest,
    HttpResponse,
    Route,
    Router,
    error_body,
    json_response,
)

log = logging.getLogger("rosettaserve.http")
Scope = dict[str, Any]
Receive = Any
Send = Any


class HttpApp:
    """A thin ASGI app: route, read the body within the size limit, answer in one body send."""

    def __init__(self, routes: list[Route], max_request_size: int) -> None:
        self.router = Router(routes)
        self.max_request_size = max_request_size

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        try:
            response = await self._handle(scope, receive)
        except ServingError as exc:
            response = error_body(exc)
        await _send(send, response)

    async def _handle(self, scope: Scope, receive: Receive) -> HttpResponse:
        route, params = self.router.match(scope["method"], scope["path"])
        try:
            headers = {
                k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]
            }
            body = await self._read_body(headers, receive)
            request = HttpRequest(
                scope["method"], scope["path"], scope["query_string"], headers, body, params
            )
            return await route.handler(request)
        except ServingError as exc:
            return route.on_error(exc)
        except Exception:
            log.exception("unhandled error on %s %s", scope["method"], scope["path"])
            return json_response({"error": "internal server error (see the server log)"}, 500)

    async def _read_body(self, headers: dict[str, str], receive: Receive) -> bytes:
        limit = self.max_request_size
        declared = headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            raise _too_large(int(declared), limit)
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                raise _too_large(size, limit)
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def _too_large(size: int, limit: int) -> PayloadTooLarge:
    return PayloadTooLarge(
        f"request body of {size} bytes exceeds the limit of {limit} bytes "
        "(start the server with a larger --max-request-size)"
    )


async def _send(send: Send, response: HttpResponse) -> None:
    headers = [
        (b"content-type", response.content_type.encode()),
        (b"content-length", str(len(response.body)).encode()),
    ]
    headers.extend((k.encode(), v.encode()) for k, v in response.headers.items())
    await send({"type": "http.response.start", "status": response.status, "headers": headers})
    await send({"type": "http.response.body", "body": response.body})
