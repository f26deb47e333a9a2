"""What the HTTP port adds around the application, when asked for: request ids, the access log,
CORS.

The HTTP server answers with ``HttpEdge(app)`` in place of the application when the access log
is on (the default, at --log-level info or debug) or CORS origins are set; otherwise with the
application itself, and none of this costs a request anything. Per request, in order: the
request id (the client's ``X-Request-ID`` when it is fit, else a new one) is set for the
request's log lines and echoed in the answer; a CORS preflight is answered before routing (and
before API keys); the answer is given its CORS headers, and its access line is written (a
streamed answer's at its end).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from time import perf_counter

from rosettaserve.observability.access_log import AccessLog
from rosettaserve.observability.request_ids import HEADER, REQUEST_ID, accepted, new_id
from rosettaserve.web.app import App
from rosettaserve.web.cors import Cors
from rosettaserve.web.routing import HttpResponse

PROTOCOL = "http"


class HttpEdge:
    def __init__(self, app: App, access: AccessLog | None, cors: Cors | None = None) -> None:
        self.app = app
        self.access = access
        self.cors = cors

    async def respond(
        self, method: str, raw_url: bytes, headers: dict[str, str], body: bytes | bytearray
    ) -> HttpResponse:
        start = perf_counter()
        sent = headers.get(HEADER)
        request_id = new_id() if sent is None else accepted(sent)
        REQUEST_ID.set(request_id)  # the request's own context (h1 runs each in a copy)
        cors = self.cors
        response = None
        if cors is not None and method == "OPTIONS":
            response = cors.preflight(headers)
        if response is None:
            response = await self.app.respond(method, raw_url, headers, body)
        # answers are built per request, their headers dict maybe not (a handler's constant):
        # the answer gets a copy of its own (a new HttpResponse cost as much again)
        out = dict(response.headers)
        out[HEADER] = request_id
        if cors is not None:
            cors.add_headers(out, headers.get("origin"))
        response.headers = out
        access = self.access
        if access is not None:
            path = raw_url.decode("latin-1")
            if response.stream is None:
                # (``length`` sums the tail in a generator: most answers have none)
                size = len(response.body) if not response.tail else response.length
                status = response.status
                access.line(
                    PROTOCOL, method, path, status, size, start=start, request_id=request_id
                )
            else:
                response.stream = _logged_stream(
                    response.stream, access, (method, path, response.status, start, request_id)
                )
        return response


async def _logged_stream(
    stream: AsyncIterator[bytes],
    access: AccessLog,
    request: tuple[str, str, int, float, str],
) -> AsyncIterator[bytes]:
    """The stream as it is; its access line once it ends (sent whole, failed or cut short)."""
    method, path, status, start, request_id = request
    sent = 0
    try:
        async for chunk in stream:
            sent += len(chunk)
            yield chunk
    finally:
        aclose = getattr(stream, "aclose", None)
        if aclose is not None:
            await aclose()
        access.line(PROTOCOL, method, path, status, sent, start=start, request_id=request_id)
