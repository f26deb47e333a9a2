"""HTTP/2 connections (RFC 9113) on the event loop: the bytes a client sends, and the frames
answered, moved between the socket and the connection's state.

The gRPC transport (``transport/grpc.py``) sits on top: it opens a ``Receiver`` for each stream
a client starts and answers through ``send_headers`` / ``send_data`` / ``send_trailers``. Only
what a server needs is here: no push, no priorities (read and ignored), no h2c upgrade (gRPC
clients open with the connection preface; an HTTP/1.1 request gets a plain-text 400). The server's
preface (its SETTINGS) waits for the client's (RFC 9113 3.4 allows it): an HTTP/1.1 client is
answered in HTTP/1.1 from the first byte.

The pieces, each apart from I/O but this one: the protocol's vocabulary (frame types, codes,
settings, what this server advertises) in ``h2_wire``; what the client's frames do
(``h2_machine``: a dispatch table of frame handlers, flow control, settings); the frames out as
the client's windows allow, resets and GOAWAY (``h2_sender``); a stream's state and the
application's side of it (``h2_stream``); what a slow client is (``h2_stalls``); the listening
port, its idle sweep and shutdown (``h2_server``). A malformed request (``h2_fields``; the
characters of its fields: ``hpack``) is reset with PROTOCOL_ERROR, and the connection goes on;
the errors RFC 9113 names for a frame are those answered, connection errors with a GOAWAY
carrying the RFC's code, then a close. Answers of one round of reads leave together
(``coalesce``), as over HTTP/1.1.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, Final, Protocol

from rosettaserve.transport.body_pace import BodyPace
from rosettaserve.transport.coalesce import WriteRound
from rosettaserve.transport.h2_machine import RESET_LIMIT, H2Machine
from rosettaserve.transport.h2_sender import PENDING_LIMIT, Sender
from rosettaserve.transport.h2_stalls import close_stalled, late_requests
from rosettaserve.transport.h2_stream import Receiver, Stream
from rosettaserve.transport.h2_wire import (
    ENHANCE_YOUR_CALM,
    INTERNAL_ERROR,
    NO_ERROR,
    PREFACE,
    PROTOCOL_ERROR,
    SERVER_PREFACE,
    SETTINGS,
    ConnectionFailure,
)
from rosettaserve.transport.sockets import no_delay

# the wire constants the tests of this module name through it
__all__ = [
    "ENHANCE_YOUR_CALM",
    "PREFACE",
    "RESET_LIMIT",
    "SETTINGS",
    "App",
    "Connection",
    "Port",
]

log = logging.getLogger("rosettaserve.grpc")

# written but not yet taken by the client: beyond it, reads pause
WRITE_BUFFER_HIGH: Final = 8 << 20
# a connection with no stream and nothing received this long is closed
IDLE_TIMEOUT_S: Final = 300.0

_HTTP1_METHODS: Final = (
    b"GET ",
    b"POST",
    b"PUT ",
    b"HEAD",
    b"DELE",
    b"OPTI",
    b"PATC",
    b"CONN",
    b"TRAC",
)


class App(Protocol):
    def open(self, conn: Connection, stream: Stream, headers: list[tuple[str, str]]) -> Receiver:
        """A stream the client started: what receives it (it may answer at once)."""


class Port(Protocol):
    """What a connection needs of the port it was accepted on (``h2_server.H2Server``)."""

    app: App
    round: WriteRound
    connections: set[Connection]
    closing: bool  # the port is shutting down: its connections take no new streams
    idle_timeout: float
    send_timeout: float
    pace: BodyPace


class Connection(asyncio.Protocol):
    """One client's connection: bytes read into its ``machine``, the frames it queues (in its
    ``sender``) written with the round of reads; reading paused while the client does not read;
    the sweep's checks."""

    def __init__(self, server: Port) -> None:
        self.server = server
        self.app = server.app
        self.transport: asyncio.Transport | None = None
        self.sender = Sender(server.round, self)
        self.machine = H2Machine(self.sender, self)
        self.preface = True  # the client's preface is still to come
        self.chunks: list[bytes] = []  # what arrived and is not parsed yet
        self.have = 0
        self.need = 1  # the first bytes tell HTTP/2 (its preface) from HTTP/1.1
        self.last_active = time.monotonic()  # the idle sweep closes connections quiet too long
        self.writable = True
        self.unwritable_since = 0.0  # the sweep saw the socket full from then (0: not full)
        self.write_waiters: list[asyncio.Future[None]] = []

    # -- asyncio.Protocol ----------------------------------------------------------------------

    def connection_made(self, transport: Any) -> None:
        """Nothing is written yet: the server's preface answers the client's (``_parse``)."""
        self.transport = transport
        no_delay(transport)
        self.server.connections.add(self)
        self.machine.going_away = self.server.closing  # accepted as the port was closing
        transport.set_write_buffer_limits(high=WRITE_BUFFER_HIGH)

    def connection_lost(self, exc: Exception | None) -> None:
        self.server.connections.discard(self)
        self.transport = None
        self.sender.lost()
        for waiter in self.write_waiters:
            if not waiter.done():
                waiter.set_result(None)

    def data_received(self, data: bytes) -> None:
        self.last_active = time.monotonic()
        self.chunks.append(data)
        self.have += len(data)
        if self.have < self.need:  # a large frame arriving in pieces: joined once, at the end
            return
        buffered = self.chunks[0] if len(self.chunks) == 1 else b"".join(self.chunks)
        try:
            rest = self._parse(buffered)
        except ConnectionFailure as exc:
            self.fail(exc.code, str(exc))
            return
        except Exception:  # a fault of ours: this connection ends, the server goes on
            log.exception("an HTTP/2 connection failed")
            self.fail(INTERNAL_ERROR, "internal error")
            return
        self.chunks = [rest] if rest else []
        self.have = len(rest)

    def pause_writing(self) -> None:
        """The client is not reading what we write: stop reading what it sends (PINGs and
        SETTINGS it floods us with would otherwise pile up their answers) until it catches up."""
        self.writable = False
        if self.transport is not None:
            self.transport.pause_reading()

    def resume_writing(self) -> None:
        self.writable = True
        self.unwritable_since = 0.0
        if self.transport is not None:
            self.transport.resume_reading()
        waiters, self.write_waiters = self.write_waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    # -- reading -------------------------------------------------------------------------------

    def _parse(self, data: bytes) -> bytes:
        """Handle the whole frames in ``data``; what is left of it (and set ``need``)."""
        pos = 0
        if self.preface:
            if not data.startswith(PREFACE):
                if PREFACE.startswith(data):  # the preface, still arriving
                    self.need = len(PREFACE)
                    return data
                if len(data) < 4:  # too little to tell an HTTP/1.1 request
                    self.need = 4
                    return data
                self._not_http2(data)
                return b""
            self.preface = False
            self.sender.emit([SERVER_PREFACE])
            pos = len(PREFACE)
        machine = self.machine
        pos = machine.receive(data, pos)
        self.need = machine.need
        return data[pos:]

    def _not_http2(self, data: bytes) -> None:
        """Not the HTTP/2 preface: a plain-text answer an HTTP/1.1 client can read, then close."""
        transport = self.transport
        if transport is None:
            return
        if data[:4] in _HTTP1_METHODS:
            text = b"this port speaks gRPC (HTTP/2 with prior knowledge), not HTTP/1.1\n"
            transport.writelines(
                [
                    b"HTTP/1.1 400 Bad Request\r\ncontent-type: text/plain\r\n",
                    b"content-length: %d\r\nconnection: close\r\n\r\n" % len(text),
                    text,
                ]
            )
            transport.close()
            return
        self.sender.emit([SERVER_PREFACE])  # a GOAWAY is no server's first frame
        self.fail(PROTOCOL_ERROR, "the connection did not start with the HTTP/2 preface")

    # -- the machine's opener: a stream the client started ---------------------------------------

    def open_stream(self, stream: Stream, headers: list[tuple[str, str]]) -> Receiver:
        return self.app.open(self, stream, headers)

    # -- the application's side: what it sends, as frames --------------------------------------

    def send_headers(self, stream: Stream, block: bytes, end_stream: bool = False) -> None:
        """A header block (``hpack.encode``): the reply's headers, or trailers-only."""
        self.sender.send_headers(stream, block, end_stream)

    def send_data(self, stream: Stream, data: bytes | memoryview) -> None:
        """Data on the stream, as far as the windows let it go now; the rest as they open."""
        self.sender.send_data(stream, data)

    def send_trailers(self, stream: Stream, block: bytes) -> None:
        """The trailers, ending the stream once the data before them is out."""
        self.sender.send_trailers(stream, block)

    def hold(self, stream: Stream, held: bool) -> None:
        """While held, the stream's window is not reopened (``H2Machine.hold``)."""
        self.machine.hold(stream, held)

    def reset(self, stream_id: int, code: int) -> None:
        """RST_STREAM: the stream ends here (its work, if any, is cancelled)."""
        self.sender.reset(stream_id, code)

    async def drain(self, stream: Stream) -> None:
        """Wait while the stream has much queued for the client, or the socket is full."""
        while stream.pending_bytes > PENDING_LIMIT and self.transport is not None:
            stream.drained = asyncio.get_running_loop().create_future()
            await stream.drained
        while not self.writable and self.transport is not None:
            waiter = asyncio.get_running_loop().create_future()
            self.write_waiters.append(waiter)
            await waiter

    # -- writing and closing -------------------------------------------------------------------

    def flush(self) -> None:
        sender = self.sender
        out, sender.out = sender.out, []
        transport = self.transport
        if out and transport is not None and not transport.is_closing():
            transport.writelines(out)

    def abort(self) -> None:
        if self.transport is not None:
            self.transport.abort()

    def goaway(self, code: int, message: str = "") -> None:
        self.sender.goaway(code, message)

    def shut(self) -> None:
        """The server is shutting down: GOAWAY, and the streams the client still starts are
        refused (those open go on)."""
        self.machine.going_away = True
        self.goaway(NO_ERROR, "the server is shutting down")

    def fail(self, code: int, message: str) -> None:
        """A connection error: GOAWAY with the reason, then close."""
        log.info("closing an HTTP/2 connection: %s", message)
        self.goaway(code, message)
        self.close()

    def close(self) -> None:
        self.flush()
        if self.transport is not None:
            self.transport.close()

    # -- the sweep -----------------------------------------------------------------------------

    @property
    def streams(self) -> dict[int, Stream]:
        return self.sender.streams

    @property
    def send_window(self) -> int:
        return self.sender.send_window

    @property
    def busy(self) -> bool:
        return bool(self.sender.streams)

    def close_if_idle(self, since: float) -> None:
        """The sweep's call (every quarter of the shortest of the idle, send and body timeouts; the
        timeouts are the server's, ``since`` is not used). No stream open and nothing received
        for the idle timeout: GOAWAY, then close (a gRPC client opens a new connection for its
        next call). Streams open: those whose answer the client takes none of for the send
        timeout are dropped, and those whose request comes too slowly (``h2_stalls``)."""
        transport = self.transport
        if transport is None:
            return
        now = time.monotonic()
        server = self.server
        if self.sender.streams or not self.writable:
            close_stalled(self, now, server.send_timeout)
            if self.sender.streams and not transport.is_closing():
                late_requests(self, now, server.pace)
        elif self.last_active < now - server.idle_timeout:
            self.goaway(NO_ERROR, "idle")
            self.close()
