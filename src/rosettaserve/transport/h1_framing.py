"""HTTP/1.1 response heads and their framing: a Content-Length, chunks, or (HTTP/1.0 clients,
which cannot read chunks) the end of the connection."""

from __future__ import annotations

import functools
from http import HTTPStatus

from rosettaserve.core.errors import PayloadTooLarge
from rosettaserve.transport.routing import HttpResponse

LENGTH, CHUNKED, UNTIL_CLOSE = 0, 1, 2  # how a body is framed
_STATUS_LINES = {s.value: f"HTTP/1.1 {s.value} {s.phrase}\r\n".encode() for s in HTTPStatus}
CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"


def head(
    response: HttpResponse, keep_alive: bool, framing: int = LENGTH, legacy: bool = False
) -> bytes:
    """The status line and headers; ``legacy``: for an HTTP/1.0 client, which must be told
    that the connection stays open."""
    start = _head_start(response.status, response.content_type)
    if framing == LENGTH and response.status != 204:  # 204: none (RFC 9110 §8.6)
        parts = [start, b"content-length: %d\r\n" % response.length]
    elif framing == CHUNKED:
        parts = [start, b"transfer-encoding: chunked\r\n"]
    else:
        parts = [start]
    for name, value in response.headers.items():
        parts += [name.encode(), b": ", value.encode(), b"\r\n"]
    if not keep_alive:
        parts.append(b"connection: close\r\n")
    elif legacy:
        parts.append(b"connection: keep-alive\r\n")
    parts.append(b"\r\n")
    return b"".join(parts)


@functools.lru_cache(maxsize=256)
def _head_start(status: int, content_type: str) -> bytes:
    """The status line and content-type line, built once per pair (handlers use a few)."""
    line = _STATUS_LINES.get(status) or f"HTTP/1.1 {status} \r\n".encode()
    return line + b"content-type: " + content_type.encode() + b"\r\n"


def too_large(size: int | None, limit: int) -> PayloadTooLarge:
    what = f"of {size} bytes" if size is not None else f"of more than {limit} bytes"
    return PayloadTooLarge(
        f"request body {what} exceeds the limit of {limit} bytes "
        "(start the server with a larger --max-request-size)"
    )
