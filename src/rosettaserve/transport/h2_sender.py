"""The sending side of an HTTP/2 connection (RFC 9113): ``h2.Connection`` is a ``Sender``.

What the application answers on a stream (``send_headers``, ``send_data``, ``send_trailers``)
goes out as frames, as far as the client's flow-control windows let it (RFC 9113 6.9); the
rest waits on its stream (``_pump`` sends it as the windows open) and the application waits
while much is queued (``drain``). Frames of one round of reads leave together (``coalesce``).
Here too: resetting a stream, GOAWAY, the close, and what the server's sweep checks (the idle
close, and the send timeout of ``h2_stalls``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING, Final

from rosettaserve.transport.h2_stalls import close_stalled, late_requests
from rosettaserve.transport.h2_stream import RESET_HERE, Stream, StreamHistory
from rosettaserve.transport.h2_wire import (
    CONTINUATION,
    DATA,
    DEFAULT_FRAME,
    DEFAULT_WINDOW,
    END_HEADERS,
    END_STREAM,
    GOAWAY,
    HEADERS,
    NO_ERROR,
    RST_STREAM,
    U32,
    frame,
)

if TYPE_CHECKING:
    from rosettaserve.transport.h2_server import H2Server

log = logging.getLogger("rosettaserve.grpc")

PENDING_LIMIT: Final = 4 << 20  # a stream's queued reply bytes beyond which its writer waits


class Sender(asyncio.Protocol):
    """What a connection sends, and the state it needs: the streams, the client's windows."""

    def __init__(self, server: H2Server) -> None:
        self.server = server
        self.transport: asyncio.Transport | None = None
        self.streams: dict[int, Stream] = {}
        self.history = StreamHistory()  # the streams no longer open, or never opened
        self.out: list[bytes | memoryview] = []
        self.send_window = DEFAULT_WINDOW
        self.peer_frame = DEFAULT_FRAME
        self.blocked: dict[int, Stream] = {}  # streams waiting for the connection's window
        self.last_active = time.monotonic()  # the idle sweep closes connections quiet too long
        self.writable = True
        self.unwritable_since = 0.0  # the sweep saw the socket full from then (0: not full)
        self.write_waiters: list[asyncio.Future[None]] = []

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

    def _emit(self, parts: list[bytes | memoryview]) -> None:
        if self.transport is None:
            return
        if not self.out:
            self.server.round.add(self)
        self.out += parts

    def flush(self) -> None:
        out, self.out = self.out, []
        transport = self.transport
        if out and transport is not None and not transport.is_closing():
            transport.writelines(out)

    def abort(self) -> None:
        if self.transport is not None:
            self.transport.abort()

    def send_headers(self, stream: Stream, block: bytes, end_stream: bool = False) -> None:
        """A header block (``hpack.encode``): the reply's headers, or trailers-only."""
        if stream.local_closed:
            return
        self._header_frames(stream.id, block, END_STREAM if end_stream else 0)
        if end_stream:
            stream.local_closed = True
            self._close_if_done(stream)

    def _header_frames(self, stream_id: int, block: bytes, flags: int) -> None:
        limit = self.peer_frame
        if len(block) <= limit:
            self._emit([frame(HEADERS, flags | END_HEADERS, stream_id, len(block)), block])
            return
        parts: list[bytes | memoryview] = []
        for start in range(0, len(block), limit):
            piece = block[start : start + limit]
            last = start + limit >= len(block)
            kind = HEADERS if start == 0 else CONTINUATION
            piece_flags = (flags if start == 0 else 0) | (END_HEADERS if last else 0)
            parts += [frame(kind, piece_flags, stream_id, len(piece)), piece]
        self._emit(parts)

    def send_data(self, stream: Stream, data: bytes | memoryview) -> None:
        """Data on the stream, as far as the windows let it go now; the rest as they open."""
        if stream.local_closed or not len(data):
            return
        if not stream.pending:
            size = len(data)
            if size <= self.send_window and size <= stream.send_window and size <= self.peer_frame:
                self._emit([frame(DATA, 0, stream.id, size), data])
                self.send_window -= size
                stream.send_window -= size
                return
        stream.pending.append(memoryview(data))
        stream.pending_bytes += len(data)
        self._pump(stream)

    def send_trailers(self, stream: Stream, block: bytes) -> None:
        """The trailers, ending the stream once the data before them is out."""
        if stream.local_closed:
            return
        if not stream.pending:
            self.send_headers(stream, block, end_stream=True)
            return
        stream.trailers = block

    def _pump(self, stream: Stream) -> None:
        while stream.pending:
            room = min(self.send_window, stream.send_window, self.peer_frame)
            if room <= 0:
                if self.send_window <= 0:
                    self.blocked[stream.id] = stream
                return
            chunk = stream.pending[0]
            if len(chunk) > room:
                stream.pending[0] = chunk[room:]
                chunk = chunk[:room]
            else:
                stream.pending.popleft()
            size = len(chunk)
            self._emit([frame(DATA, 0, stream.id, size), chunk])
            self.send_window -= size
            stream.send_window -= size
            stream.pending_bytes -= size
            stream.stalled_since = 0.0
        if stream.drained is not None and not stream.drained.done():
            stream.drained.set_result(None)
        if stream.trailers is not None:
            block, stream.trailers = stream.trailers, None
            self.send_headers(stream, block, end_stream=True)

    async def drain(self, stream: Stream) -> None:
        """Wait while the stream has much queued for the client, or the socket is full."""
        while stream.pending_bytes > PENDING_LIMIT and self.transport is not None:
            stream.drained = asyncio.get_running_loop().create_future()
            await stream.drained
        while not self.writable and self.transport is not None:
            waiter = asyncio.get_running_loop().create_future()
            self.write_waiters.append(waiter)
            await waiter

    def reset(self, stream_id: int, code: int) -> None:
        """RST_STREAM: the stream ends here (its work, if any, is cancelled)."""
        self._emit([frame(RST_STREAM, 0, stream_id, 4), U32.pack(code)])
        self.history.remember_reset(stream_id, RESET_HERE)
        stream = self.streams.pop(stream_id, None)
        if stream is not None:
            self.blocked.pop(stream_id, None)
            self._cancel(stream)

    def _cancel(self, stream: Stream) -> None:
        stream.local_closed = stream.remote_closed = True
        if stream.drained is not None and not stream.drained.done():
            stream.drained.set_result(None)
        receiver, stream.receiver = stream.receiver, None
        if receiver is not None:
            receiver.cancelled()

    def _close_if_done(self, stream: Stream) -> None:
        if stream.local_closed and stream.remote_closed:
            self.streams.pop(stream.id, None)
            if self.blocked:  # (mostly empty: no call of pop, a generic one compiled)
                self.blocked.pop(stream.id, None)
            stream.receiver = None

    def goaway(self, code: int, message: str = "") -> None:
        debug = message.encode()[:256]
        self._emit(
            [
                frame(GOAWAY, 0, 0, 8 + len(debug)),
                U32.pack(self.history.last_stream_id),
                U32.pack(code),
                debug,
            ]
        )

    def fail(self, code: int, message: str) -> None:
        """A connection error: GOAWAY with the reason, then close."""
        log.info("closing an HTTP/2 connection: %s", message)
        self.goaway(code, message)
        self.close()

    def close(self) -> None:
        self.flush()
        if self.transport is not None:
            self.transport.close()

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
        if self.streams or not self.writable:
            close_stalled(self, now, self.server.send_timeout)
            if self.streams and not transport.is_closing():
                late_requests(self, now, self.server.pace)
        elif self.last_active < now - self.server.idle_timeout:
            self.goaway(NO_ERROR, "idle")
            self.close()

    @property
    def busy(self) -> bool:
        return bool(self.streams)
