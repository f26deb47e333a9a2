"""What an HTTP/1.1 request head must hold (RFC 9112, RFC 9110), and the answers to those that
do not: the limits and timeouts of the server, the Host rules, the versions and methods served.

These run off the common path: the connection calls them for a head that is not plain HTTP/1.1
with a Host already seen, and for the errors of the parser.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from rosettaserve.transport.defaults import (
    DEFAULT_BODY_MIN_RATE,
    DEFAULT_BODY_TIMEOUT,
    DEFAULT_HEADER_TIMEOUT,
    DEFAULT_MAX_HEADER_SIZE,
    DEFAULT_MAX_REQUEST_LINE,
    DEFAULT_SEND_TIMEOUT,
)
from rosettaserve.web.routing import HttpResponse, json_response


@dataclass(frozen=True)
class H1Limits:
    """How much of a request head the server holds, and how long it waits for a request."""

    header_timeout: float = DEFAULT_HEADER_TIMEOUT  # a head not whole this long after it began
    body_timeout: float = DEFAULT_BODY_TIMEOUT  # a body with no byte for this long (body_pace)
    body_min_rate: int = DEFAULT_BODY_MIN_RATE  # a body slower than this past body_timeout
    max_request_line: int = DEFAULT_MAX_REQUEST_LINE  # the request target (URL), in bytes
    max_header_size: int = DEFAULT_MAX_HEADER_SIZE  # the header fields together, in bytes
    send_timeout: float = DEFAULT_SEND_TIMEOUT  # answers waiting on a client that reads nothing


def refusal(status: int, message: str) -> HttpResponse:
    """An answer the connection gives on its own (the project's error shape)."""
    return json_response({"error": message}, status)


def url_too_long(limit: int) -> HttpResponse:
    return refusal(
        414,
        f"request target longer than {limit} bytes (start the server with a larger "
        "--max-request-line)",
    )


def head_too_large(limit: int) -> HttpResponse:
    return refusal(
        431,
        f"request header fields larger than {limit} bytes together (start the server with a "
        "larger --max-header-size)",
    )


def timed_out(what: str, seconds: float, flag: str) -> HttpResponse:
    return refusal(408, f"{what} within {seconds:g} s ({flag})")


# RFC 3986 host [ ":" port ]: an IP literal in brackets, or a registered name / IPv4 address
_HOST = re.compile(r"(?:\[[0-9A-Za-z:.]+\]|[A-Za-z0-9\-._~%!$&'()*+,;=]*)(?::[0-9]*)?")


def host_problem(host: str | None, legacy: bool) -> str | None:
    """Why a request's Host header is refused (RFC 9112 §3.2), or None when it is fine. Host
    lines a request repeats arrive joined by ", ", which no valid Host holds."""
    if host is None:
        return None if legacy else "an HTTP/1.1 request without a Host header"
    if ", " in host:
        return "more than one Host header"
    if not _HOST.fullmatch(host):
        return f"invalid Host header {host[:100]!r}"
    return None


def version_refused(version: str) -> HttpResponse:
    return refusal(505, f"HTTP/{version} is not supported here: send HTTP/1.1 (or HTTP/1.0)")


# The methods the parser knows (llhttp); any other token is a method the server does not
# implement (501), anything else in a request line's place is a malformed request (400).
PARSER_METHODS = frozenset(
    b"DELETE GET HEAD POST PUT CONNECT OPTIONS TRACE COPY LOCK MKCOL MOVE PROPFIND PROPPATCH "
    b"SEARCH UNLOCK BIND REBIND UNBIND ACL REPORT MKACTIVITY CHECKOUT MERGE M-SEARCH NOTIFY "
    b"SUBSCRIBE UNSUBSCRIBE PATCH PURGE MKCALENDAR LINK UNLINK SOURCE QUERY PRI".split()
)
_REQUEST_LINE = re.compile(rb"([!#$%&'*+.^_`|~0-9A-Za-z-]+) [^ \r\n]+ HTTP/\d\.\d\r?\n")


def unknown_method(data: bytes | memoryview) -> bytes | None:
    """The method of the request line in ``data`` that the parser refused for its method, when
    it is a well-formed line with a method no server here implements (a token, but unknown).
    The line is looked for anywhere: a request may follow the body before it directly."""
    for found in _REQUEST_LINE.finditer(bytes(data)):
        if found.group(1) not in PARSER_METHODS:
            return found.group(1)
    return None


def restart_at(data: bytes | memoryview, method: bytes, url: bytes, version: str) -> int:
    """Where in ``data`` the request line ``method url HTTP/version`` starts (at a line's
    start), or -1: the parser stopped at its version, and the request is read again from there."""
    raw = bytes(data)
    line = b"%s %s HTTP/%s" % (method, url, version.encode())
    start = raw.find(line)
    while start > 0 and raw[start - 1] != 0x0A:
        start = raw.find(line, start + 1)
    return start
