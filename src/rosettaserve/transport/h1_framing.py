"""HTTP/1.1 response heads and their framing: a Content-Length, chunks, or (HTTP/1.0 clients,
which cannot read chunks) the end of the connection."""

from __future__ import annotations

from http import HTTPStatus
from typing import Final

from rosettaserve.core.errors import PayloadTooLarge
from rosettaserve.web.routing import HttpResponse

# how a body is framed (Final: compiled, constants instead of a global's lookup each)
LENGTH: Final = 0
CHUNKED: Final = 1
UNTIL_CLOSE: Final = 2
_STATUS_LINES: Final = {s.value: f"HTTP/1.1 {s.value} {s.phrase}\r\n".encode() for s in HTTPStatus}
CONTINUE: Final = b"HTTP/1.1 100 Continue\r\n\r\n"


def head(
    response: HttpResponse, keep_alive: bool, framing: int = LENGTH, legacy: bool = False
) -> bytes:
    """The status line and headers; ``legacy``: for an HTTP/1.0 client, which must be told
    that the connection stays open."""
    status = response.status
    key = (status, response.content_type)
    start = _STARTS.get(key)
    if start is None:
        start = _head_start(key)
    if framing == LENGTH and status != 204:  # 204: none (RFC 9110 §8.6)
        # (``length`` sums the tail in a generator: most answers have none)
        size = len(response.body) if not response.tail else response.length
        start += b"content-length: %d\r\n" % size
    elif framing == CHUNKED:
        start += b"transfer-encoding: chunked\r\n"
    headers = response.headers
    if not headers and keep_alive and not legacy:  # most answers: no list, no join
        return start + b"\r\n"
    parts = [start]
    for name, value in headers.items():
        parts += [name.encode(), b": ", value.encode(), b"\r\n"]
    if not keep_alive:
        parts.append(b"connection: close\r\n")
    elif legacy:
        parts.append(b"connection: keep-alive\r\n")
    parts.append(b"\r\n")
    return b"".join(parts)


# The status line and content-type line of each (status, content type) answered: handlers use
# a few. A dict read here costs less than functools.lru_cache's call [cost: head-cache].
_STARTS: Final[dict[tuple[int, str], bytes]] = {}
MAX_STARTS: Final = 256


def _head_start(key: tuple[int, str]) -> bytes:
    status, content_type = key
    line = _STATUS_LINES.get(status) or f"HTTP/1.1 {status} \r\n".encode()
    start = line
    if content_type:  # "": none, as TorchServe answers when a handler sets none
        start += b"content-type: " + content_type.encode() + b"\r\n"
    if len(_STARTS) >= MAX_STARTS:  # many content types: start again
        _STARTS.clear()
    _STARTS[key] = start
    return start


def too_large(size: int | None, limit: int) -> PayloadTooLarge:
    what = f"of {size} bytes" if size is not None else f"of more than {limit} bytes"
    return PayloadTooLarge(
        f"request body {what} exceeds the limit of {limit} bytes "
        "(start the server with a larger --max-request-size)"
    )
