"""A lean HTTP/1.1 server on httptools.

Responses leave together (``coalesce``): those answered while the event loop handles one round
of reads are written once that round is over, each connection's in one ``writelines`` (one
writev: heads and bodies together). Pipelined requests are answered in order, bodies are
bounded before they are buffered, idle connections time out, and shutdown drains the requests
in flight.

Reads land in one receive buffer per server (the parser copies what it keeps), except a large
body with a Content-Length: the socket reads it straight into a buffer of its own size, which
the handler receives as it is (a ``bytearray``) -- no chunk copies, no join.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import logging
import socket
import ssl
import time
from collections import deque
from collections.abc import Awaitable
from http import HTTPStatus
from typing import Any, Protocol

import httptools

from rosettaserve.core.errors import InvalidInput, PayloadTooLarge, ServingError
from rosettaserve.transport.coalesce import WriteRound
from rosettaserve.transport.eager import Adopted
from rosettaserve.transport.routing import HttpResponse, error_body
from rosettaserve.transport.sockets import listen, no_delay

log = logging.getLogger("rosettaserve.http")

IDLE_TIMEOUT_S = 30.0
MAX_PIPELINE = 32
MAX_HEADER_BYTES = 64 * 1024
MAX_DISCARD_BYTES = 64 * 1024 * 1024
LINGER_S = 5.0  # how long a rejected upload may go on being discarded
_STATUS_LINES = {s.value: f"HTTP/1.1 {s.value} {s.phrase}\r\n".encode() for s in HTTPStatus}
_CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"
RECV_BYTES = 256 * 1024  # the shared receive buffer
BULK_MIN_BYTES = 256 * 1024  # a declared body this large is read into its own buffer


class App(Protocol):
    """What the server answers with: ``transport.http.HttpApp``, or any object like it."""

    async def respond(
        self, method: str, raw_url: bytes, headers: dict[str, str], body: bytes | bytearray
    ) -> HttpResponse: ...


class Pending:
    __slots__ = ("body", "error", "headers", "keep_alive", "method", "url")

    def __init__(
        self, method: str, url: bytes, headers: dict[str, str], body: bytes | bytearray
    ) -> None:
        self.method, self.url, self.headers, self.body = method, url, headers, body
        self.keep_alive = True
        self.error: ServingError | None = None


class Connection(asyncio.BufferedProtocol):
    def __init__(self, server: HttpServer) -> None:
        self.server = server
        self.parser = httptools.HttpRequestParser(self)
        self.transport: asyncio.Transport | None = None
        self.queue: deque[Pending] = deque()
        self.task: asyncio.Task[None] | None = None
        self.last_active = time.monotonic()  # the idle sweep closes connections quiet too long
        self.paused = False
        self.writable = asyncio.Event()
        self.writable.set()
        self.out: list[Any] = []  # responses waiting for the end of the loop's round of reads
        self.close_after = False  # the last of them closes the connection
        self._reset()

    def _reset(self) -> None:
        self.url = b""
        self.headers: dict[str, str] = {}
        self.header_bytes = 0
        self.chunks: list[bytes] = []
        self.size = 0
        self.bulk: bytearray | None = None  # a large body's own buffer, while it fills
        self.bulk_method = ""
        self.bulk_keep_alive = True
        self.error: ServingError | None = None
        self.discarding = False

    # -- asyncio.Protocol ----------------------------------------------------------------------

    def connection_made(self, transport: Any) -> None:
        self.transport = transport
        no_delay(transport)
        self.server.connections.add(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self.server.connections.discard(self)
        self.transport = None
        if self.task is not None:
            self.task.cancel()  # the client went away: stop its work

    def pause_writing(self) -> None:
        self.writable.clear()

    def resume_writing(self) -> None:
        self.writable.set()

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
            self.parser = httptools.HttpRequestParser(self)
            self._complete(self.bulk, self.bulk_keep_alive)

    def data_received(self, data: bytes | memoryview) -> None:
        self.last_active = time.monotonic()
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._reject_now(InvalidInput("protocol upgrades are not supported on this port"))
        except httptools.HttpParserError as exc:
            self._reject_now(InvalidInput(f"malformed HTTP request: {exc}"))

    # -- httptools callbacks -------------------------------------------------------------------

    def on_message_begin(self) -> None:
        self._reset()

    def on_url(self, url: bytes) -> None:
        self.url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        self.header_bytes += len(name) + len(value)
        if self.header_bytes > MAX_HEADER_BYTES:
            raise httptools.HttpParserError(f"headers larger than {MAX_HEADER_BYTES} bytes")
        key = name.decode("latin-1").lower()
        text = value.decode("latin-1")
        self.headers[key] = f"{self.headers[key]}, {text}" if key in self.headers else text

    def on_headers_complete(self) -> None:
        limit = self.server.max_request_size
        declared = self.headers.get("content-length", "")
        length = int(declared) if declared.isdigit() else -1
        if length > limit:
            self._too_large(too_large(length, limit))
            return
        if self.headers.get("expect", "").lower() == "100-continue" and self.transport:
            self.flush()
            self.transport.write(_CONTINUE)
        if length >= BULK_MIN_BYTES and "transfer-encoding" not in self.headers:
            self.bulk = bytearray(length)
            self.bulk_method = self.parser.get_method().decode()
            self.bulk_keep_alive = self.parser.should_keep_alive()

    def on_body(self, body: bytes) -> None:
        self.size += len(body)
        if self.discarding:
            if self.size > MAX_DISCARD_BYTES:
                self.close()
            return
        if self.error is None and self.size > self.server.max_request_size:
            self._too_large(too_large(None, self.server.max_request_size))
        if self.bulk is not None:
            self.bulk[self.size - len(body) : self.size] = body
        elif self.error is None:
            self.chunks.append(body)

    def on_message_complete(self) -> None:
        if self.discarding:
            self.close()
            return
        body = self.bulk if self.bulk is not None else b"".join(self.chunks)
        self._complete(body, self.parser.should_keep_alive())

    def _complete(self, body: bytes | bytearray, keep_alive: bool) -> None:
        """A whole request is in: answer it now, or queue it behind those before it."""
        method = self.bulk_method if self.bulk is not None else self.parser.get_method().decode()
        self.bulk = None
        pending = Pending(method, self.url, self.headers, body)
        pending.keep_alive = keep_alive
        pending.error = self.error
        if self.task is None and not self.queue and pending.error is None:
            self._answer_eagerly(pending)
            return
        self.queue.append(pending)
        if len(self.queue) > MAX_PIPELINE and self.transport is not None:
            self.transport.pause_reading()
            self.paused = True
        if self.task is None:
            self.task = asyncio.get_running_loop().create_task(self._serve_queue())

    # -- answering -----------------------------------------------------------------------------

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
        app = self.server.app
        if first is not None and not await self._answer(await first[0], first[1]):
            return
        while self.queue:
            pending = self.queue.popleft()
            if self.paused and len(self.queue) < MAX_PIPELINE // 2 and self.transport:
                self.transport.resume_reading()
                self.paused = False
            if pending.error is not None:
                response = error_body(pending.error)
            else:
                response = await app.respond(
                    pending.method, pending.url, pending.headers, pending.body
                )
            if not await self._answer(response, pending):
                return
        self.task = None
        self.last_active = time.monotonic()

    async def _answer(self, response: HttpResponse, pending: Pending) -> bool:
        """Send it; False when the connection is done with (closed, or not kept alive)."""
        if self.transport is None or self.close_after:  # an answer before it said "close"
            return False
        if response.stream is None:
            return self._write(response, pending)
        keep_alive = pending.keep_alive and not self.server.closing
        keep_alive = await self._write_stream(response, keep_alive)
        if not keep_alive:
            self.close()
        return keep_alive and self.transport is not None

    def _write(self, response: HttpResponse, pending: Pending) -> bool:
        """Head and body to ``out``, written with the loop's next flush; False when the
        connection is closed after it."""
        if self.transport is None or self.close_after:
            return False
        keep_alive = pending.keep_alive and not self.server.closing
        if not self.out:
            self.server.round.add(self)
        self.out += [head(response, keep_alive), response.body, *response.tail]
        if not keep_alive:
            self.close_after = True
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
            transport.close()

    async def _write_stream(self, response: HttpResponse, keep_alive: bool) -> bool:
        """Chunked transfer encoding, one chunk per item, waiting while the client is slow."""
        assert response.stream is not None
        assert self.transport is not None
        self.flush()
        self.transport.write(head(response, keep_alive, chunked=True))
        try:
            async for chunk in response.stream:
                if self.transport is None:
                    return False
                if chunk:
                    self.transport.writelines([b"%x\r\n" % len(chunk), chunk, b"\r\n"])
                    await self.writable.wait()
        except Exception:
            log.exception("a streaming response failed midway; closing the connection")
            return False
        if self.transport is not None:
            self.transport.write(b"0\r\n\r\n")
        return keep_alive

    def _too_large(self, error: ServingError) -> None:
        self.chunks.clear()
        if self.task is None and not self.queue:
            self._reject_now(error)
        else:
            self.error = error

    def _reject_now(self, error: ServingError) -> None:
        """Answer before the body is read, then discard what the client still sends and close."""
        self.flush()
        if self.transport is None or self.discarding or self.close_after:
            return
        response = error_body(error)
        self.transport.writelines([head(response, keep_alive=False), response.body])
        self.discarding = True
        if isinstance(error, InvalidInput):  # the stream cannot be parsed any further
            self.transport.close()
        elif self.transport.can_write_eof():
            # half-close: the client sees the answer and EOF; what it still sends is discarded
            # (closing outright could reset the connection before it reads the answer)
            self.transport.write_eof()
            asyncio.get_running_loop().call_later(LINGER_S, self.close)

    # -- closing -------------------------------------------------------------------------------

    def close(self) -> None:
        self.flush()
        if self.transport is not None:
            self.transport.close()

    def abort(self) -> None:
        if self.transport is not None:
            self.transport.abort()

    def close_if_idle(self, since: float) -> None:
        """Close it if no request is being answered and nothing arrived after ``since``."""
        if self.task is None and self.last_active < since:
            self.close()

    @property
    def busy(self) -> bool:
        return self.task is not None


async def _ready(response: HttpResponse) -> HttpResponse:
    return response


def head(response: HttpResponse, keep_alive: bool, chunked: bool = False) -> bytes:
    start = _head_start(response.status, response.content_type)
    if chunked:
        parts = [start, b"transfer-encoding: chunked\r\n"]
    else:
        parts = [start, b"content-length: %d\r\n" % response.length]
    for name, value in response.headers.items():
        parts += [name.encode(), b": ", value.encode(), b"\r\n"]
    if not keep_alive:
        parts.append(b"connection: close\r\n")
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


class HttpServer:
    def __init__(
        self, app: App, max_request_size: int, idle_timeout: float = IDLE_TIMEOUT_S
    ) -> None:
        self.app = app
        self.max_request_size = max_request_size
        self.idle_timeout = idle_timeout
        self.connections: set[Connection] = set()
        self.recv_buffer = memoryview(bytearray(RECV_BYTES))  # read into, parsed at once
        self.closing = False
        self.round = WriteRound()
        self._server: asyncio.Server | None = None
        self._sweeper: asyncio.Task[None] | None = None

    async def start(self, sock: socket.socket, tls: ssl.SSLContext | None = None) -> None:
        self._server, self._sweeper = await listen(
            sock, lambda: Connection(self), self.connections, self.idle_timeout, tls
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
