"""A lean HTTP/1.1 server on httptools.

Responses leave together (``coalesce``): those answered while the event loop handles one round
of reads are written once that round is over, each connection's in one ``writelines`` (one
writev: heads and bodies together). Pipelined requests are answered in order, one answer each,
bodies are bounded before they are buffered, idle connections time out, and shutdown drains the
requests in flight.

Reads land in one receive buffer per server (the parser copies what it keeps), except a large
body with a Content-Length: the socket reads it straight into a buffer of its own size, which
the handler receives as it is (a ``bytearray``) -- no chunk copies, no join.

A client holds what the settings say and no more (``h1_head.H1Limits``): the request target and
the header fields are counted while they arrive (414, 431); a head or body that is late gets
408 (checked by the server's one sweep, not a timer per request); a client that does not read
its answers is no longer read (the transport's high-water mark). A request the server refuses
is answered after the answers before it, then the connection is closed: its output half at
once, the rest once the client has had time to read the answer (what it still sends is
discarded, unparsed).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import socket
import ssl
import time
from collections import deque
from collections.abc import Awaitable
from typing import Any, Protocol

import httptools

from rosettaserve.transport import h1_head as rules
from rosettaserve.transport.coalesce import WriteRound
from rosettaserve.transport.eager import Adopted
from rosettaserve.transport.h1_framing import (
    CHUNKED,
    CONTINUE,
    LENGTH,
    UNTIL_CLOSE,
    close_stream,
    head,
    too_large,
)
from rosettaserve.transport.h1_head import H1Limits
from rosettaserve.transport.routing import HttpResponse, error_body
from rosettaserve.transport.sockets import listen, no_delay

log = logging.getLogger("rosettaserve.http")

IDLE_TIMEOUT_S = 30.0
MAX_PIPELINE = 32  # requests queued behind one being answered before reading stops
MAX_DISCARD_BYTES = 64 * 1024 * 1024  # what a refused client may go on sending before the close
LINGER_S = 5.0  # how long a refused client has to read its answer before the close
WRITE_HIGH_WATER = 64 * 1024  # unsent answer bytes past which the client is no longer read
# answers held for the end of the round at most: the loop may read a socket many times in one
# round (libuv reads up to 32 times while data is there), and a client pipelining without
# reading must meet the high-water mark before all of that is answered
MAX_OUT_PARTS = 256
KNOWN_HOSTS = 64  # Host values seen valid, not checked again
MAX_BLANK_BYTES = 1024  # empty lines before a request (RFC 9112 §2.2 asks for one at least)
RECV_BYTES = 256 * 1024  # the shared receive buffer
BULK_MIN_BYTES = 256 * 1024  # a declared body this large is read into its own buffer
HELD_PIPELINE, HELD_WRITES = 1, 2  # why reading is paused
IDLE, HEAD, BODY = 0, 1, 2  # where the parser is in a request


class App(Protocol):
    """What the server answers with: ``transport.http.HttpApp``, or any object like it."""

    async def respond(
        self, method: str, raw_url: bytes, headers: dict[str, str], body: bytes | bytearray
    ) -> HttpResponse: ...


class Refused(Exception):
    """Raised in a parser callback to stop the parser: the request was refused."""


class Pending:
    __slots__ = ("body", "error", "headers", "keep_alive", "legacy", "method", "url")

    def __init__(
        self,
        method: str,
        url: bytes,
        headers: dict[str, str],
        body: bytes | bytearray,
        *,
        keep_alive: bool,
        legacy: bool,
        error: HttpResponse | None = None,
    ) -> None:
        self.method, self.url, self.headers, self.body = method, url, headers, body
        self.keep_alive = keep_alive
        self.legacy = legacy  # an HTTP/1.0 request
        self.error = error  # set: the answer, a refusal


class Connection(asyncio.BufferedProtocol):
    def __init__(self, server: HttpServer) -> None:
        self.server = server
        self.parser = httptools.HttpRequestParser(self)
        self.transport: asyncio.Transport | None = None
        self.queue: deque[Pending] = deque()
        self.task: asyncio.Task[None] | None = None
        self.last_active = time.monotonic()  # the last read (or drain of the answers)
        self.held = 0  # HELD_*: why reading is paused
        self.writable = asyncio.Event()
        self.writable.set()
        self.out: list[Any] = []  # responses waiting for the end of the loop's round of reads
        self.close_after = False  # the last of them closes the connection
        self.phase = IDLE
        self.head_since = 0.0  # when the head being read began
        self.stopped = False  # a request was refused: nothing more is parsed
        self.eof_sent = False
        self.discarded = 0
        self.lenient = False  # the client sent HTTP/1.x past 1.1: served as 1.1
        self._reset()

    def _reset(self) -> None:
        self.url = b""
        self.headers: dict[str, str] = {}
        self.header_bytes = 0
        self.head_seen = -1  # url and header bytes when the last read ended inside the head
        self.head_unseen = 0  # bytes of the reads since, which completed no header field
        self.blank_bytes = 0  # bytes of empty lines before the next request
        self.chunks: list[bytes] = []
        self.size = 0
        self.bulk: bytearray | None = None  # a body's own buffer, while it fills
        self.method = ""
        self.keep_alive = True
        self.legacy = False

    # -- asyncio.Protocol ----------------------------------------------------------------------

    def connection_made(self, transport: Any) -> None:
        self.transport = transport
        no_delay(transport)
        with contextlib.suppress(NotImplementedError):  # a transport without flow control
            transport.set_write_buffer_limits(high=WRITE_HIGH_WATER)
        self.server.connections.add(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self.server.connections.discard(self)
        self.transport = None
        if self.task is not None:
            self.task.cancel()  # the client went away: stop its work

    def pause_writing(self) -> None:
        self.writable.clear()
        self._hold(HELD_WRITES)

    def resume_writing(self) -> None:
        self.writable.set()
        self.last_active = time.monotonic()
        self._release(HELD_WRITES)

    def _hold(self, reason: int) -> None:
        transport = self.transport
        if not self.held and transport is not None and not transport.is_closing():
            transport.pause_reading()
        self.held |= reason

    def _release(self, reason: int) -> None:
        if not self.held & reason:
            return
        self.held &= ~reason
        transport = self.transport
        if not self.held and transport is not None and not transport.is_closing():
            transport.resume_reading()
            self.head_since = self.last_active = time.monotonic()  # not late while not read

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
        if self.stopped:
            self._discard(len(data))
            return
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade as upgrade:
            self._after_upgrade(data[upgrade.args[0] :])
        except httptools.HttpParserError as exc:
            if not self.stopped:
                self._parser_error(exc, data)
        else:
            phase = self.phase
            if phase == HEAD:
                self._head_arriving(len(data))
            elif phase == IDLE and self.task is None and not self.out:
                self._blank_lines(len(data))  # a read with no request in it

    # -- httptools callbacks -------------------------------------------------------------------

    def on_message_begin(self) -> None:
        self._reset()
        self.phase = HEAD
        self.head_since = self.last_active

    def on_url(self, url: bytes) -> None:
        self.url += url
        if len(self.url) > self.server.limits.max_request_line:
            self._refuse(rules.url_too_long(self.server.limits.max_request_line))
            raise Refused

    def on_header(self, name: bytes, value: bytes) -> None:
        self.header_bytes += len(name) + len(value)
        if self.header_bytes > self.server.limits.max_header_size:
            self._refuse(rules.head_too_large(self.server.limits.max_header_size))
            raise Refused
        key = name.decode("latin-1").lower()
        text = value.decode("latin-1")
        self.headers[key] = f"{self.headers[key]}, {text}" if key in self.headers else text

    def on_headers_complete(self) -> None:
        self.phase = BODY
        parser = self.parser
        headers = self.headers
        self.method = parser.get_method().decode()
        self.keep_alive = keep_alive = parser.should_keep_alive()
        if (
            not keep_alive
            or "connection" in headers
            or self.lenient
            or headers.get("host") not in self.server.hosts
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
            self.bulk = bytearray(length)

    def on_body(self, body: bytes) -> None:
        self.size += len(body)
        if self.bulk is not None:
            self.bulk[self.size - len(body) : self.size] = body
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
        """Check a head that is not plain HTTP/1.1 with a Host seen before (RFC 9112: version,
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
            self.server.know_host(host)
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
            self.bulk = bytearray(length)
        return True

    def _expects(self, expect: str) -> None:
        """``100 Continue`` to an HTTP/1.1 client that asks for it, unless answers to earlier
        requests are still to come (it would be read as theirs)."""
        transport = self.transport
        if expect.lower() != "100-continue" or self.legacy or transport is None:
            return
        if self.task is None and not self.queue:
            self.flush()
            transport.write(CONTINUE)

    def _head_arriving(self, nbytes: int) -> None:
        """A read ended inside a head: the parser holds the header field it is reading without
        telling, so a read that completes no field counts whole."""
        seen = len(self.url) + self.header_bytes
        if seen != self.head_seen:
            self.head_seen, self.head_unseen = seen, 0
            return
        self.head_unseen += nbytes
        limit = self.server.limits.max_header_size
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
        if self.stopped:
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
                self._refuse(rules.refusal(501, f"method {text} is not implemented"))
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
        """A whole request is in: answer it now, or queue it behind those before it."""
        self.phase = IDLE
        self.bulk = None
        pending = Pending(
            self.method,
            self.url,
            self.headers,
            body,
            keep_alive=self.keep_alive,
            legacy=self.legacy,
        )
        if self.task is None and not self.queue:
            self._answer_eagerly(pending)
            return
        self.queue.append(pending)
        if len(self.queue) > MAX_PIPELINE:
            self._hold(HELD_PIPELINE)
        if self.task is None:
            self.task = asyncio.get_running_loop().create_task(self._serve_queue())

    def _answer_eagerly(self, pending: Pending) -> None:
        """Run the handler at once, up to its first wait. Most requests (a fast model) need none:
        the response is written here, without a task. Otherwise a task takes the handler over
        where it stopped, and answers the requests pipelined behind it after it."""
        app = self.server.app
        handler = app.respond(pending.method, pending.url, pending.headers, pending.body)
        context = contextvars.copy_context()  # the task that may take over runs in it too
        try:
            waits_for = context.run(handler.send, None)
        except StopIteration as finished:
            response: HttpResponse = finished.value
            if response.stream is None:
                self._write(response, pending)
                return
            first: Awaitable[HttpResponse] = _ready(response)
        else:
            first = Adopted(handler, waits_for)
        self.task = asyncio.get_running_loop().create_task(
            self._serve_queue((first, pending)), context=context
        )

    async def _serve_queue(
        self, first: tuple[Awaitable[HttpResponse], Pending] | None = None
    ) -> None:
        """Answer the queued requests in order (after ``first``: a response on its way)."""
        try:
            if first is not None and not await self._answer(await first[0], first[1]):
                return
            app = self.server.app
            while self.queue:
                pending = self.queue.popleft()
                if self.held & HELD_PIPELINE and len(self.queue) < MAX_PIPELINE // 2:
                    self._release(HELD_PIPELINE)
                if pending.error is not None:
                    response = pending.error
                else:
                    response = await app.respond(
                        pending.method, pending.url, pending.headers, pending.body
                    )
                if not await self._answer(response, pending):
                    return
            self.last_active = time.monotonic()
        finally:
            self.task = None

    async def _answer(self, response: HttpResponse, pending: Pending) -> bool:
        """Send it; False when the connection is done with (closed, or not kept alive)."""
        if self.transport is None or self.close_after:  # an answer before it said "close"
            return False
        if response.stream is None:
            return self._write(response, pending)
        keep_alive = pending.keep_alive and not self.server.closing
        keep_alive = await self._write_stream(response, pending, keep_alive)
        if not keep_alive:
            self.close_after = True
            self.flush()
        return keep_alive and self.transport is not None

    def _write(self, response: HttpResponse, pending: Pending) -> bool:
        """Head and body to ``out``, written with the loop's next flush; False when the
        connection is closed after it. The answer to HEAD is the head alone."""
        if self.transport is None or self.close_after:
            return False
        keep_alive = pending.keep_alive and not self.server.closing
        if not self.out:
            self.server.round.add(self)
        if pending.method == "HEAD":
            self.out.append(head(response, keep_alive, LENGTH, pending.legacy))
        else:
            self.out += [head(response, keep_alive, LENGTH, pending.legacy), response.body]
            self.out += response.tail
        if not keep_alive:
            self.close_after = True
        elif len(self.out) > MAX_OUT_PARTS:  # a burst of pipelined requests: write them now,
            self.flush()  # so that a client reading nothing stops being read (pause_writing)
        return keep_alive

    def flush(self) -> None:
        """Write the responses in ``out`` (and close, if the last one said so): before anything
        written at once, which must not overtake them."""
        out, self.out = self.out, []
        transport = self.transport
        if transport is None or transport.is_closing():  # the client left, or aborted: drop
            return
        if out:
            transport.writelines(out)
        if self.close_after:
            if self.stopped:
                self._linger(transport)
            else:
                transport.close()

    async def _write_stream(
        self, response: HttpResponse, pending: Pending, keep_alive: bool
    ) -> bool:
        """One write per item, waiting while the client is slow: chunked transfer encoding, or
        for an HTTP/1.0 client the bytes as they are, ended by the close."""
        stream = response.stream
        assert stream is not None
        assert self.transport is not None
        self.flush()
        legacy = pending.legacy
        framing = UNTIL_CLOSE if legacy else CHUNKED
        keep_alive = keep_alive and not legacy
        self.transport.write(head(response, keep_alive, framing, legacy))
        if pending.method == "HEAD":
            await close_stream(stream)
            return keep_alive
        try:
            async for chunk in stream:
                if self.transport is None:
                    return False
                if chunk:
                    if legacy:
                        self.transport.write(chunk)
                    else:
                        self.transport.writelines([b"%x\r\n" % len(chunk), chunk, b"\r\n"])
                    await self.writable.wait()
        except Exception:
            log.exception("a streaming response failed midway; closing the connection")
            return False
        if self.transport is not None and not legacy:
            self.transport.write(b"0\r\n\r\n")
        return keep_alive

    def _refuse(self, response: HttpResponse | None) -> bool:
        """Answer the request being read with ``response`` (None: it has its answer), after the
        answers before it; then close: nothing more the client sends is parsed. Returns False
        (the request is done with)."""
        if self.stopped:
            return False
        # the method as far as the parser read it (HEAD: an answer without its body)
        method = self.method or (self.parser.get_method().decode() if self.phase == HEAD else "")
        self.stopped = True
        self.phase = IDLE
        self.bulk = None
        if response is None:  # the close follows the answers already given or on their way
            if self.task is None and not self.queue:
                self.close_after = True
                if not self.out:
                    self.flush()
            return False
        pending = Pending(
            method, self.url, {}, b"", keep_alive=False, legacy=self.legacy, error=response
        )
        if self.task is None and not self.queue:
            self._write(response, pending)
        else:
            self.queue.append(pending)
        return False

    def _linger(self, transport: asyncio.Transport) -> None:
        """Close the output half now and the connection a little later: closed outright while
        the client still sends, it could be reset before the client reads its answer."""
        if self.eof_sent:
            return
        self.eof_sent = True
        if not transport.can_write_eof():
            transport.close()
            return
        transport.write_eof()
        self.held = 0
        transport.resume_reading()  # what the client still sends is read, and discarded
        asyncio.get_running_loop().call_later(LINGER_S, self.close)

    def _discard(self, nbytes: int) -> None:
        self.discarded += nbytes
        if self.discarded > MAX_DISCARD_BYTES:
            self.close()

    # -- closing -------------------------------------------------------------------------------

    def close(self) -> None:
        self.flush()
        if self.transport is not None:
            self.transport.close()

    def abort(self) -> None:
        if self.transport is not None:
            self.transport.abort()

    def close_if_idle(self, since: float) -> None:
        """The sweep's call (every quarter of the shortest timeout): close the connection when
        it has been idle too long, or when the client does not read its answers; answer 408 to
        a request whose head or body is late. ``since`` is not used: the timeouts are the
        server's own."""
        if self.stopped or self.transport is None:
            return
        server = self.server
        now = time.monotonic()
        quiet = now - self.last_active
        if self.held:  # reading is paused: late is the client that does not read
            if self.held & HELD_WRITES and quiet > server.idle_timeout:
                self.abort()
        elif self.phase == IDLE and not self.blank_bytes:
            if self.task is None and quiet > server.idle_timeout:
                self.close()
        elif self.phase != BODY:  # a head, or empty lines before one
            limit = server.limits.header_timeout
            if now - self.head_since > limit:
                what = "the request head did not arrive whole"
                self._refuse(rules.timed_out(what, limit, "--header-timeout"))
        elif quiet > server.limits.body_timeout:
            what = "the request body stalled: no byte of it arrived"
            self._refuse(rules.timed_out(what, server.limits.body_timeout, "--body-timeout"))

    @property
    def busy(self) -> bool:
        return self.task is not None


async def _ready(response: HttpResponse) -> HttpResponse:
    return response


class HttpServer:
    def __init__(
        self,
        app: App,
        max_request_size: int,
        idle_timeout: float = IDLE_TIMEOUT_S,
        limits: H1Limits | None = None,
    ) -> None:
        self.app = app
        self.max_request_size = max_request_size
        self.idle_timeout = idle_timeout
        self.limits = limits or H1Limits()
        self.connections: set[Connection] = set()
        self.recv_buffer = memoryview(bytearray(RECV_BYTES))  # read into, parsed at once
        self.hosts: set[str | None] = set()  # Host values seen valid (KNOWN_HOSTS at most)
        self.closing = False
        self.round = WriteRound()
        self._server: asyncio.Server | None = None
        self._sweeper: asyncio.Task[None] | None = None

    def parser_for(self, conn: Connection) -> httptools.HttpRequestParser:
        parser = httptools.HttpRequestParser(conn)
        if conn.lenient:
            parser.set_dangerous_leniencies(lenient_version=True)
        return parser

    def know_host(self, host: str) -> None:
        if len(self.hosts) >= KNOWN_HOSTS:
            self.hosts.clear()
        self.hosts.add(host)

    async def start(self, sock: socket.socket, tls: ssl.SSLContext | None = None) -> None:
        limits = self.limits
        period = min(self.idle_timeout, limits.header_timeout, limits.body_timeout)
        self._server, self._sweeper = await listen(
            sock, lambda: Connection(self), self.connections, period, tls
        )

    async def shutdown(self, timeout: float | None = None) -> None:
        """Stop accepting, let requests in flight finish (then close), close idle connections."""
        self.closing = True
        if self._server is not None:
            self._server.close()
        if self._sweeper is not None:
            self._sweeper.cancel()
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        while True:
            for conn in list(self.connections):
                if not conn.busy:
                    conn.close()
            if not any(c.busy for c in self.connections):
                break
            if deadline is not None and loop.time() > deadline:
                break
            await asyncio.sleep(0.01)
        for conn in list(self.connections):
            if conn.transport is not None:
                conn.transport.abort()
