"""A lean HTTP/1.1 server on httptools: the reading half of a connection, and the server.

Reads land in one receive buffer per server (the parser copies what it keeps), except a large
body with a Content-Length: the socket reads it straight into a buffer of its own size, which
the handler receives as it is (a ``bytearray``) -- no chunk copies, no join. The connection's
``h1_answers.Answers`` gives the answers; this half owns its clock and whether it is read.

A client holds what the settings say and no more (``h1_head.H1Limits``): the request target and
the header fields are counted while they arrive (414, 431); a head or body that is late gets
408 (checked by the server's one sweep, not a timer per request), and so does a body dripped too
slowly, timed as a whole from the end of its head (``body_pace``); a client that does not read
its answers is no longer read (the transport's high-water mark); idle connections are closed.
The common path (plain HTTP/1.1, the Host of the request before) only notes where the parser
is and when the head began; the rest of RFC 9112's rules run for the heads that need them
(``h1_head``).
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
import time
from typing import Any, Final

import httptools

from rosettaserve.transport import h1_head as rules
from rosettaserve.transport.body_pace import BodyPace
from rosettaserve.transport.h1_answers import HELD_WRITES, Answers, Pending, Serving
from rosettaserve.transport.h1_framing import too_large
from rosettaserve.transport.h1_head import H1Limits
from rosettaserve.transport.observers import RefusalLog
from rosettaserve.transport.sockets import listen, no_delay
from rosettaserve.web.app import App
from rosettaserve.web.routing import HttpResponse, error_body

try:  # a large body's buffer, not zeroed first: the socket writes each of its bytes
    from rosettaserve.transport.body_buffer import unfilled
except ImportError:  # not built (scripts/compile_native.py): zeroed
    unfilled = bytearray

__all__ = ["BULK_MIN_BYTES", "Connection", "HttpServer"]

IDLE_TIMEOUT_S = 30.0
WRITE_HIGH_WATER = 64 * 1024  # unsent answer bytes past which the client is no longer read
MAX_BLANK_BYTES = 1024  # empty lines before a request (RFC 9112 §2.2 asks for one at least)
RECV_BYTES = 256 * 1024  # the shared receive buffer
# Final: compiled, these are constants, not a lookup in the module's dict [cost: final-static]
BULK_MIN_BYTES: Final = 256 * 1024  # a declared body this large is read into its own buffer
IDLE: Final = 0  # where the parser is in a request: between two,
HEAD: Final = 1  # in its head,
BODY: Final = 2  # in its body


class Refused(Exception):
    """Raised in a parser callback to stop the parser: the request was refused."""


class Connection(asyncio.BufferedProtocol):
    def __init__(self, server: HttpServer) -> None:
        self.server = server
        self.answers = Answers(server.serving, self)
        self.last_active = time.monotonic()  # the last read (or drain of the answers)
        self.head_since = 0.0  # when the head being read began
        self.held = 0  # HELD_*: why reading is paused
        self.parser = httptools.HttpRequestParser(self)
        self.phase = IDLE
        self.lenient = False  # the client sent HTTP/1.x past 1.1: served as 1.1
        self.host_seen = ""  # the Host of this connection's last checked head (valid)
        self.method = ""  # these two are the head's, once it is whole
        self.keep_alive = True
        # a head that went on past a read: url and header bytes when the last read ended, the
        # bytes of the reads since which completed no header field, and which head it is
        self.head_seen, self.head_unseen, self.head_seen_since = -1, 0, 0.0
        self.body_due = 0.0  # the clock of the body being read (``body_pace``)
        self._reset()

    def _reset(self) -> None:
        self.url = b""
        self.headers: dict[str, str] = {}
        self.header_bytes = 0
        self.blank_bytes = 0  # bytes of empty lines before the next request
        self.chunks: list[bytes] = []
        self.size = 0
        self.bulk: bytearray | None = None  # a body's own buffer, while it fills
        self.legacy = False

    # -- asyncio.Protocol ----------------------------------------------------------------------

    def connection_made(self, transport: Any) -> None:
        self.answers.transport = transport
        no_delay(transport)
        with contextlib.suppress(NotImplementedError):  # a transport without flow control
            transport.set_write_buffer_limits(high=WRITE_HIGH_WATER)
        self.server.connections.add(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self.server.connections.discard(self)
        self.answers.lost()

    def pause_writing(self) -> None:
        self.answers.writable.clear()
        self.hold(HELD_WRITES)

    def resume_writing(self) -> None:
        self.answers.writable.set()
        self.last_active = time.monotonic()
        self.release(HELD_WRITES)

    # -- h1_answers.Reading --------------------------------------------------------------------

    def hold(self, reason: int) -> None:
        transport = self.answers.transport
        if not self.held and transport is not None and not transport.is_closing():
            transport.pause_reading()
        self.held |= reason

    def release(self, reason: int) -> None:
        if not self.held & reason:
            return
        self.held &= ~reason
        transport = self.answers.transport
        if not self.held and transport is not None and not transport.is_closing():
            transport.resume_reading()
            self.head_since = self.last_active = time.monotonic()  # not late while not read

    def answered(self) -> None:
        self.last_active = time.monotonic()

    @property
    def busy(self) -> bool:
        return self.answers.task is not None

    def get_buffer(self, sizehint: int) -> memoryview:
        if self.bulk is not None:
            return memoryview(self.bulk)[self.size :]  # no further than the body's end
        return self.server.recv_buffer

    def buffer_updated(self, nbytes: int) -> None:
        if self.bulk is None:
            self.data_received(self.server.recv_buffer[:nbytes])
            return
        self.last_active = time.monotonic()
        self.size += nbytes
        if self.size == len(self.bulk):
            # the parser saw the body's start only, and the read stopped at the body's end:
            # a fresh parser takes the next request from its first byte
            self.parser = self.server.parser_for(self)
            self._complete(self.bulk)

    def data_received(self, data: bytes | memoryview) -> None:
        self.last_active = time.monotonic()
        if self.answers.stopped:
            self.answers.discard(len(data))
            return
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade as upgrade:
            self._after_upgrade(data[upgrade.args[0] :])
        except httptools.HttpParserError as exc:
            if not self.answers.stopped:
                self._parser_error(exc, data)
        else:
            phase = self.phase
            if phase == HEAD:
                self._head_arriving(len(data))
            elif phase == IDLE and self.answers.task is None and not self.answers.out:
                self._blank_lines(len(data))  # a read with no request in it

    # -- httptools callbacks -------------------------------------------------------------------

    def on_message_begin(self) -> None:
        self._reset()
        self.phase = HEAD
        self.head_since = self.last_active

    def on_url(self, url: bytes) -> None:
        self.url += url
        if len(self.url) > self.server.max_url:
            self._refuse(rules.url_too_long(self.server.max_url))
            raise Refused

    def on_header(self, name: bytes, value: bytes) -> None:
        self.header_bytes += len(name) + len(value) + 4  # as on the wire: ": " and CRLF
        if self.header_bytes > self.server.max_head:
            self._refuse(rules.head_too_large(self.server.max_head))
            raise Refused
        key = name.decode("latin-1").lower()
        text = value.decode("latin-1")
        # one lookup (a name is a new str: hashed once), not ``in`` and then a store
        headers = self.headers
        count = len(headers)
        held = headers.setdefault(key, text)
        if len(headers) == count:  # a repeated field: its values joined (RFC 9110 §5.3)
            headers[key] = f"{held}, {text}"

    def on_headers_complete(self) -> None:
        self.phase = BODY
        self.body_due = self.last_active + self.server.body_timeout  # (BodyPace.due, inline)
        parser = self.parser
        headers = self.headers
        self.method = parser.get_method().decode()
        self.keep_alive = keep_alive = parser.should_keep_alive()
        if (
            not keep_alive
            or "connection" in headers
            or self.lenient
            or headers.get("host") != self.host_seen
        ) and not self._unusual_head(headers):
            raise Refused
        limit = self.server.max_request_size
        declared = headers.get("content-length", "")
        length = int(declared) if declared.isdigit() else -1
        if length > limit:
            self._refuse(error_body(too_large(length, limit)))
            raise Refused
        if "expect" in headers:
            self._expects(headers["expect"])
        if length >= BULK_MIN_BYTES and self.bulk is None and "transfer-encoding" not in headers:
            # not zeroed [cost: body-buffer]:
            # handed on only when every byte of it was read into it
            self.bulk = unfilled(length)

    def on_body(self, body: bytes) -> None:
        self.size += len(body)
        if self.bulk is not None:
            # through a memoryview: a bytearray's slice set from bytes copies them twice (into
            # a bytearray of their own first), ~230 KB of a 1 MiB JSON body's first read
            memoryview(self.bulk)[self.size - len(body) : self.size] = body
            return
        if self.size > self.server.max_request_size:
            self._refuse(error_body(too_large(None, self.server.max_request_size)))
            raise Refused
        self.chunks.append(body)

    def on_message_complete(self) -> None:
        bulk = self.bulk
        if bulk is None:
            self._complete(b"".join(self.chunks))
        elif self.size == len(bulk):
            self._complete(bulk)
        # else: a body the parser skips (a request with Upgrade), read past it

    # -- the request head, off the common path -------------------------------------------------

    def _unusual_head(self, headers: dict[str, str]) -> bool:
        """Check a head that is not plain HTTP/1.1 with the Host checked last (RFC 9112: version,
        Host, Transfer-Encoding of HTTP/1.0, Upgrade); False: it was refused."""
        parser = self.parser
        version = parser.get_http_version()
        if version == "1.0":
            self.legacy = True
        elif version != "1.1" and not (self.lenient and version.startswith("1.")):
            return self._refuse(rules.version_refused(version))
        if self.legacy and "transfer-encoding" in headers:
            return self._refuse(
                rules.refusal(
                    400, "an HTTP/1.0 request with Transfer-Encoding: its framing is not trusted"
                )
            )
        host = headers.get("host")
        problem = rules.host_problem(host, self.legacy)
        if problem is not None:
            return self._refuse(rules.refusal(400, problem))
        if host is not None:
            self.host_seen = host
        if "upgrade" in headers and parser.should_upgrade():
            return self._upgrade_ignored(headers)
        return True

    def _upgrade_ignored(self, headers: dict[str, str]) -> bool:
        """The server does not switch protocols; it answers the request as if it had no
        Upgrade (RFC 9110 §7.8). The parser stops at the end of the head, so a body is read
        past it, into a buffer of its own."""
        if "transfer-encoding" in headers:
            return self._refuse(
                rules.refusal(400, "a request with Upgrade and a chunked body is not served")
            )
        declared = headers.get("content-length", "")
        length = int(declared) if declared.isdigit() else 0
        if 0 < length <= self.server.max_request_size:
            self.bulk = unfilled(length)
        return True

    def _expects(self, expect: str) -> None:
        """``100 Continue`` to an HTTP/1.1 client that asks for it (``Answers.go_on``)."""
        if expect.lower() == "100-continue" and not self.legacy:
            self.answers.go_on()

    def _head_arriving(self, nbytes: int) -> None:
        """A read ended inside a head: the parser holds the header field it is reading without
        telling, so a read that completes no field counts whole."""
        seen = len(self.url) + self.header_bytes
        if seen != self.head_seen or self.head_since != self.head_seen_since:
            self.head_seen, self.head_unseen, self.head_seen_since = seen, 0, self.head_since
            return
        self.head_unseen += nbytes
        limit = self.server.max_head
        if self.header_bytes + self.head_unseen > limit:
            self._refuse(rules.head_too_large(limit))

    def _blank_lines(self, nbytes: int) -> None:
        """Empty lines before a request (RFC 9112 §2.2): a few are ignored, and they start the
        head's time (a client sending nothing else is late as a slow head is)."""
        if not self.blank_bytes:
            self.head_since = self.last_active
        self.blank_bytes += nbytes
        if self.blank_bytes > MAX_BLANK_BYTES:
            self._refuse(rules.refusal(400, "empty lines instead of a request"))

    def _after_upgrade(self, rest: bytes | memoryview) -> None:
        """The parser stopped after a request with Upgrade (or CONNECT): the next bytes are the
        request's body, then the next request, read by a fresh parser."""
        if self.answers.stopped:
            return
        self.parser = self.server.parser_for(self)
        if self.method == "CONNECT":  # answered (not implemented); what follows is a tunnel's
            self._refuse(None)
            return
        bulk = self.bulk
        if bulk is not None:
            take = min(len(bulk) - self.size, len(rest))
            bulk[self.size : self.size + take] = rest[:take]
            self.size += take
            if self.size < len(bulk):
                return  # the rest of it is read into it (get_buffer)
            self._complete(bulk)
            rest = rest[take:]
        if len(rest):
            self.data_received(rest)

    def _parser_error(self, exc: httptools.HttpParserError, data: bytes | memoryview) -> None:
        reason = str(exc)
        if isinstance(exc, httptools.HttpParserInvalidMethodError):
            method = rules.unknown_method(data)
            if method is not None:
                text = method.decode("latin-1")
                self._refuse(rules.refusal(501, f"method {text} is not implemented"), text)
                return
        elif reason == "Invalid HTTP version":
            version = self.parser.get_http_version()
            if version.startswith("1.") and not self.lenient and self._reread(data, version):
                return
            self._refuse(rules.version_refused(version))
            return
        elif "PRI" in reason:  # the HTTP/2 connection preface
            self._refuse(rules.version_refused("2.0"))
            return
        self._refuse(rules.refusal(400, f"malformed HTTP request: {reason}"))

    def _reread(self, data: bytes | memoryview, version: str) -> bool:
        """Read the request again with a parser that takes an HTTP/1.x past 1.1 (served as 1.1,
        RFC 9110 §2.5), from its request line; False when that line is not in ``data``."""
        start = rules.restart_at(data, self.parser.get_method(), self.url, version)
        if start < 0:
            return False
        self.lenient = True
        self.parser = self.server.parser_for(self)
        self.phase = IDLE
        self.data_received(data[start:])
        return True

    # -- answering -----------------------------------------------------------------------------

    def _complete(self, body: bytes | bytearray) -> None:
        """A whole request is in: to be answered."""
        self.phase = IDLE
        self.bulk = None
        pending = Pending(self.method, self.url, self.headers, body)
        pending.keep_alive = self.keep_alive
        pending.legacy = self.legacy
        answers = self.answers
        if answers.task is None and not answers.queue:
            answers.answer_eagerly(pending)
        else:
            answers.take(pending)

    def _refuse(self, response: HttpResponse | None, method: str = "") -> bool:
        """Answer the request being read with ``response`` (None: it has its answer), after the
        answers before it; then close: nothing more the client sends is parsed. Returns False
        (the request is done with). ``method``: one the parser does not know (501)."""
        if self.answers.stopped:
            return False
        # the method as far as the parser read it (HEAD: an answer without its body)
        phase = self.phase
        if phase == BODY:
            method = self.method
        elif phase == HEAD and not method:
            method = self.parser.get_method().decode()
        self.phase = IDLE
        self.bulk = None
        if response is None:  # the close follows the answers already given or on their way
            self.answers.refused(None)
        else:
            pending = Pending(method, self.url, {}, b"")
            pending.keep_alive, pending.legacy, pending.error = False, self.legacy, response
            self.answers.refused(pending)
            access = self.server.access
            if access is not None:  # answered before any application: its line from here
                access.refused(method, self.url, response.status, len(response.body))
        return False

    # -- the sweep -----------------------------------------------------------------------------

    def close_if_idle(self, since: float) -> None:
        """The sweep's call (every quarter of the shortest timeout): close the connection when
        it has been idle too long, or when the client does not read its answers; answer 408 to
        a request whose head or body is late. ``since`` is not used: the timeouts are the
        server's own."""
        answers = self.answers
        if answers.stopped or answers.transport is None:
            return
        server = self.server
        now = time.monotonic()
        quiet = now - self.last_active
        if self.held:  # reading is paused: late is the client that does not read
            if self.held & HELD_WRITES and quiet > server.limits.send_timeout:
                answers.abort()
            elif self.phase == BODY:  # the body is not late while not read: its clock restarts
                self.body_due = max(self.body_due, server.pace.due(now, self.size))
        elif self.phase == IDLE and not self.blank_bytes:
            if answers.task is None and quiet > server.idle_timeout:
                answers.close()
        elif self.phase != BODY:  # a head, or empty lines before one
            limit = server.limits.header_timeout
            if now - self.head_since > limit:
                what = "the request head did not arrive whole"
                self._refuse(rules.timed_out(what, limit, "--header-timeout"))
        else:
            self._late_body(now, quiet)

    def _late_body(self, now: float, quiet: float) -> None:
        """408 to a body that stalled, or that arrives too slowly (``body_pace``)."""
        pace = self.server.pace
        if quiet > pace.timeout:
            self._refuse(rules.refusal(408, pace.stalled("the request body")))
        elif pace.overdue(self.body_due, self.size, now):
            self._refuse(rules.refusal(408, pace.too_slow("the request body")))


class HttpServer:
    def __init__(
        self,
        app: App,
        max_request_size: int,
        idle_timeout: float = IDLE_TIMEOUT_S,
        limits: H1Limits | None = None,
    ) -> None:
        self.max_request_size = max_request_size
        self.idle_timeout = idle_timeout
        self.limits = limits = limits or H1Limits()
        self.max_url, self.max_head = limits.max_request_line, limits.max_header_size
        self.pace = BodyPace(limits.body_timeout, limits.body_min_rate)
        self.body_timeout = limits.body_timeout
        self.connections: set[Connection] = set()
        self.recv_buffer = memoryview(bytearray(RECV_BYTES))  # read into, parsed at once
        self.serving = Serving(app)  # what the connections' answers share
        self._server: asyncio.Server | None = None
        self._sweeper: asyncio.Task[None] | None = None
        self.access: RefusalLog | None = None  # set: the requests it refuses are logged too

    def parser_for(self, conn: Connection) -> httptools.HttpRequestParser:
        parser = httptools.HttpRequestParser(conn)
        if conn.lenient:
            parser.set_dangerous_leniencies(lenient_version=True)
        return parser

    async def start(self, sock: socket.socket, tls: ssl.SSLContext | None = None) -> None:
        limits = self.limits
        period = min(self.idle_timeout, limits.header_timeout, limits.body_timeout)
        period = min(period, limits.send_timeout)
        self._server, self._sweeper = await listen(
            sock, lambda: Connection(self), self.connections, period, tls
        )

    async def shutdown(self, timeout: float | None = None) -> None:
        """Stop accepting, let requests in flight finish (then close), close idle connections."""
        self.serving.closing = True
        if self._server is not None:
            self._server.close()
        if self._sweeper is not None:
            self._sweeper.cancel()
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        while True:
            for conn in list(self.connections):
                if not conn.busy:
                    conn.answers.close()
            if not any(c.busy for c in self.connections):
                break
            if deadline is not None and loop.time() > deadline:
                break
            await asyncio.sleep(0.01)
        for conn in list(self.connections):
            conn.answers.abort()
