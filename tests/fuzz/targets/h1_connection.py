"""The HTTP/1.1 connection (``transport/h1.py`` around httptools) fed arbitrary bytes, answering
with the server's real routes and models.

Properties: nothing escapes the protocol's methods; what it writes is a sequence of well-formed
responses (status line, headers, a body exactly as its framing says; none for HEAD, 1xx, 204,
304); no 5xx but the RFC's own 501 and 505, and no error in the server's log; at most one final
response per request the bytes hold (plus one for the request that could not be parsed) and at
most one ``100 Continue`` before it; and a valid request on a new connection afterwards is
answered 200. A request the bytes leave unfinished is then late (the sweep finds it long after:
408 to a head or body, the close of an idle connection): its answer holds to the same rules.
"""

from __future__ import annotations

import functools
import re
from typing import TYPE_CHECKING, Any

import httptools

from tests.fuzz.fakes import Harness, RecordingTransport, deliver, pieces, settle

if TYPE_CHECKING:
    from rosettaserve.transport.h1 import Connection

ALLOWED_5XX = {501, 505}  # not implemented (an unknown method), HTTP version not supported
MAX_REQUEST_SIZE = 64 * 1024
READY = b"GET /v2/health/ready HTTP/1.1\r\nHost: fuzz\r\n\r\n"
LATE_BY_S = 1e6  # how long after its last read the sweep finds the connection
_STATUS = re.compile(rb"HTTP/1\.[01] (\d{3})(?: [^\r\n]*)?\r\n")


class RequestCounter:
    """The requests that the bytes hold, as httptools reads them: their methods, in order. An
    Upgrade is not taken (RFC 9110 7.8): the request is answered, and after its body (its
    Content-Length) the next one is read; a CONNECT, or an Upgrade with a chunked body, is the
    last request."""

    def __init__(self, data: bytes) -> None:
        self.methods: list[bytes] = []
        self.begun = 0
        self.failed = False
        self._seen_url = False
        self._headers: dict[bytes, bytes] = {}
        pos = 0
        while pos < len(data):
            parser = httptools.HttpRequestParser(self)
            parser.set_dangerous_leniencies(lenient_version=True)  # HTTP/1.x past 1.1 is served
            self._parser = parser
            try:
                parser.feed_data(data[pos:])
                return
            except httptools.HttpParserUpgrade as upgrade:
                length = self._headers.get(b"content-length", b"0")
                if parser.get_method() == b"CONNECT" or b"transfer-encoding" in self._headers:
                    return
                if not length.isdigit():
                    return
                pos += int(upgrade.args[0]) + int(length)
            except httptools.HttpParserError:
                self.failed = True
                return

    def on_message_begin(self) -> None:
        self.begun += 1
        self._seen_url = False
        self._headers = {}

    def on_header(self, name: bytes, value: bytes) -> None:
        self._headers[name.lower()] = value.strip()

    def on_url(self, url: bytes) -> None:
        if not self._seen_url:  # the method is read by now, even if the rest cannot be
            self._seen_url = True
            self.methods.append(self._parser.get_method())


def responses(data: bytes, methods: list[bytes]) -> list[int]:
    """The statuses of the responses in ``data`` (1xx included), checking each one's framing;
    the i-th final response answers a request with method ``methods[i]``; past the end of
    ``methods``, one whose request could not be parsed, with a body or (the last) without."""
    statuses: list[int] = []
    pos = 0
    finals = 0
    while pos < len(data):
        match = _STATUS.match(data, pos)
        assert match, f"not a status line at {pos}: {data[pos : pos + 80]!r}"
        status = int(match.group(1))
        end = data.find(b"\r\n\r\n", match.start())
        assert end >= 0, f"a response head without its end: {data[pos : pos + 200]!r}"
        headers = _headers(data[match.end() : end + 2])
        pos = end + 4
        statuses.append(status)
        if status < 200:
            assert status == 100, status
            continue
        method = methods[finals] if finals < len(methods) else None
        finals += 1
        if method is None and pos == len(data):
            continue  # a request that could not be parsed: HEAD or not, the server judged
        if method == b"HEAD" or status in (204, 304):
            assert "transfer-encoding" not in headers or method == b"HEAD"
            continue
        pos = _body_end(data, pos, headers)
    return statuses


def _headers(block: bytes) -> dict[str, str]:
    headers: dict[str, str] = {}
    for line in block.split(b"\r\n"):
        if not line:
            continue
        name, sep, value = line.partition(b":")
        assert sep, f"a header line without a colon: {line!r}"
        assert name, f"a header line without a name: {line!r}"
        assert name == name.strip(), f"blanks around a header name: {line!r}"
        key = name.decode("latin-1").lower()
        assert key not in headers, f"header {key} twice"
        headers[key] = value.strip().decode("latin-1")
    return headers


def _body_end(data: bytes, pos: int, headers: dict[str, str]) -> int:
    if headers.get("transfer-encoding") == "chunked":
        assert "content-length" not in headers
        while True:
            line_end = data.find(b"\r\n", pos)
            assert line_end > pos, f"a chunk without its size line at {pos}"
            size = int(data[pos:line_end], 16)
            pos = line_end + 2 + size
            assert data[pos : pos + 2] == b"\r\n", "a chunk not followed by CRLF"
            pos += 2
            if size == 0:
                return pos
    length = headers.get("content-length")
    assert length is not None, f"no content-length: {headers}"
    assert length.isdigit(), f"content-length {length!r}"
    assert pos + int(length) <= len(data), "a body shorter than its content-length"
    return pos + int(length)


@functools.cache
def http_server() -> Any:
    """One for the whole run (its receive buffer is large)."""
    from rosettaserve.transport.h1 import HttpServer

    return HttpServer(Harness.get().server.app, max_request_size=MAX_REQUEST_SIZE)


async def exchange(data: bytes) -> tuple[bytes, bytes]:
    """What the server writes for ``data`` on one connection, then for a valid request on a
    fresh connection."""
    from rosettaserve.transport.h1 import Connection

    server = http_server()
    garbage = await _one_connection(Connection(server), list(pieces(data)), late=True)
    ready = await _one_connection(Connection(server), [READY])
    return garbage, ready


async def _one_connection(conn: Connection, reads: list[bytes], late: bool = False) -> bytes:
    """What the server writes for ``reads``; ``late``: then the sweep finds the connection
    long after (every clock of it moved back)."""
    transport = RecordingTransport()
    conn.connection_made(transport)

    def busy() -> bool:  # answers on their way (a closed connection writes no more)
        return not transport.closed and conn.busy

    for read in reads:
        if transport.closed:
            break
        deliver(conn, read)
        await settle(busy)
    if late and not transport.closed:
        conn.head_since -= LATE_BY_S
        conn.last_active -= LATE_BY_S
        conn.body_due -= LATE_BY_S
        conn.close_if_idle(0.0)
        await settle(busy)
    conn.connection_lost(None)
    await settle(lambda: False)
    return bytes(transport.data)


def check(data: bytes) -> None:
    written, ready = Harness.get().run(exchange(data))
    counter = RequestCounter(data)
    statuses = responses(written, counter.methods)
    bad = [s for s in statuses if s >= 500 and s not in ALLOWED_5XX]
    assert not bad, f"answered {bad}: {written[:600]!r}"
    finals = [s for s in statuses if s >= 200]
    limit = counter.begun + 1 if counter.failed or not counter.begun else counter.begun
    assert len(finals) <= limit, f"{len(finals)} answers to {counter.begun} requests"
    assert statuses.count(100) <= max(counter.begun, 1), "100 Continue more than once"
    assert ready.startswith(b"HTTP/1.1 200 "), f"a valid request afterwards got {ready[:200]!r}"
