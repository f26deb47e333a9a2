"""The same HTTP application under any ASGI server (uvicorn, hypercorn, ...): routes, errors in
each protocol's shape, streamed answers.

    uvicorn.run(AsgiApp(server.http_app), port=8000)

The application answers exactly as on the server's own HTTP/1.1 port; what the port itself
does (its limits, timeouts, keep-alive) is then the ASGI server's. A request body is read whole
first, at most ``max_request_size`` bytes (else 413); a streamed answer is sent item by item
and closed early when the client goes away. Only HTTP is served here: gRPC needs the server's
own HTTP/2 port.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from rosettaserve.core.errors import PayloadTooLarge
from rosettaserve.core.streaming import close_stream
from rosettaserve.web.app import DEFAULT_MAX_INFLATED, App
from rosettaserve.web.routing import HttpResponse, error_body

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]


class Gone(Exception):
    """The client left before its request was whole."""


class AsgiApp:
    def __init__(self, app: App, max_request_size: int = DEFAULT_MAX_INFLATED) -> None:
        self.app = app
        self.max_request_size = max_request_size

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":  # nothing to start: the caller's server loaded models
            await _lifespan(receive, send)
            return
        if scope["type"] != "http":
            raise ValueError(f"only HTTP is served over ASGI, not {scope['type']}")
        headers: dict[str, str] = {}
        for name, value in scope["headers"]:  # a repeated field: joined (RFC 9110 §5.3)
            key, text = name.decode("latin-1").lower(), value.decode("latin-1")
            headers[key] = f"{headers[key]}, {text}" if key in headers else text
        raw_url = scope.get("raw_path") or scope["path"].encode("utf-8")
        if scope.get("query_string"):
            raw_url += b"?" + scope["query_string"]
        try:
            body = await self._body(receive)
        except Gone:
            return  # no one to answer
        if body is None:
            limit = self.max_request_size
            refusal = PayloadTooLarge(f"request body larger than the limit of {limit} bytes")
            await _send(send, error_body(refusal), scope["method"], receive)
            return
        response = await self.app.respond(scope["method"], raw_url, headers, body)
        await _send(send, response, scope["method"], receive)

    async def _body(self, receive: Receive) -> bytes | None:
        """The request body, whole (None: larger than ``max_request_size``)."""
        parts: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                raise Gone
            part = message.get("body", b"")
            size += len(part)
            if size > self.max_request_size:
                return None
            parts.append(part)
            if not message.get("more_body", False):
                return b"".join(parts)


async def _send(send: Send, response: HttpResponse, method: str, receive: Receive) -> None:
    fields = [(b"content-type", response.content_type.encode("latin-1"))]
    if response.stream is None and response.status != 204:
        fields.append((b"content-length", b"%d" % response.length))
    fields += [(k.encode("latin-1"), v.encode("latin-1")) for k, v in response.headers.items()]
    await send({"type": "http.response.start", "status": response.status, "headers": fields})
    if response.stream is not None:
        await _send_stream(send, response, method, receive)
        return
    body = b"" if method == "HEAD" else b"".join((response.body, *response.tail))
    await send({"type": "http.response.body", "body": body})


async def _send_stream(send: Send, response: HttpResponse, method: str, receive: Receive) -> None:
    """Item by item, until the stream ends or the client leaves (its stream is closed then)."""
    stream = response.stream
    assert stream is not None
    gone = asyncio.ensure_future(receive())  # the request is read: what comes is a disconnect
    try:
        if method != "HEAD":
            async for chunk in stream:
                if gone.done():
                    return
                if chunk:
                    await send({"type": "http.response.body", "body": chunk, "more_body": True})
        await send({"type": "http.response.body", "body": b""})
    finally:
        gone.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await gone
        await close_stream(stream)


async def _lifespan(receive: Receive, send: Send) -> None:
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return
