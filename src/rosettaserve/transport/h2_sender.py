"""The sending side of an HTTP/2 connection (RFC 9113), apart from I/O: frames out, as the
client's flow-control windows allow; the streams open and those remembered.

What the application answers on a stream (``send_headers``, ``send_data``, ``send_trailers``)
goes out as frames, as far as the client's flow-control windows let it (RFC 9113 6.9); the
rest waits on its stream (``pump`` sends it as the windows open). Frames are queued in ``out``;
the connection (``h2``) writes them with its round of reads (``coalesce``). Here too: resetting
a stream, GOAWAY, and the end of a stream once both sides have closed it.
"""

from __future__ import annotations

from typing import Final

from rosettaserve.transport.coalesce import Flushable, WriteRound
from rosettaserve.transport.h2_stream import (
    CLOSED,
    RESET_BY_CLIENT,
    RESET_HERE,
    Stream,
    StreamHistory,
)
from rosettaserve.transport.h2_wire import (
    CONTINUATION,
    DATA,
    DEFAULT_FRAME,
    DEFAULT_WINDOW,
    END_HEADERS,
    END_STREAM,
    GOAWAY,
    HEADERS,
    RST_STREAM,
    U32,
    frame,
)

PENDING_LIMIT: Final = 4 << 20  # a stream's queued reply bytes beyond which its writer waits


class Sender:
    """What the server owes a client's connection, as frames: the streams, the client's
    windows. ``owner`` writes ``out`` when ``round`` says (it is added when ``out`` fills)."""

    def __init__(self, round: WriteRound, owner: Flushable) -> None:
        self.round = round
        self.owner = owner
        self.closed = False  # the connection is gone: nothing is queued any more
        self.streams: dict[int, Stream] = {}
        self.history = StreamHistory()  # the streams no longer open, or never opened
        self.out: list[bytes | memoryview] = []
        self.send_window = DEFAULT_WINDOW
        self.peer_frame = DEFAULT_FRAME
        self.blocked: dict[int, Stream] = {}  # streams waiting for the connection's window

    def emit(self, parts: list[bytes | memoryview]) -> None:
        if self.closed:
            return
        if not self.out:
            self.round.add(self.owner)
        self.out += parts

    def send_headers(self, stream: Stream, block: bytes, end_stream: bool = False) -> None:
        """A header block (``hpack.encode``): the reply's headers, or trailers-only."""
        if stream.local_closed:
            return
        self._header_frames(stream.id, block, END_STREAM if end_stream else 0)
        if end_stream:
            stream.end_local()
            self.close_if_done(stream)

    def _header_frames(self, stream_id: int, block: bytes, flags: int) -> None:
        limit = self.peer_frame
        if len(block) <= limit:
            self.emit([frame(HEADERS, flags | END_HEADERS, stream_id, len(block)), block])
            return
        parts: list[bytes | memoryview] = []
        for start in range(0, len(block), limit):
            piece = block[start : start + limit]
            last = start + limit >= len(block)
            kind = HEADERS if start == 0 else CONTINUATION
            piece_flags = (flags if start == 0 else 0) | (END_HEADERS if last else 0)
            parts += [frame(kind, piece_flags, stream_id, len(piece)), piece]
        self.emit(parts)

    def send_data(self, stream: Stream, data: bytes | memoryview) -> None:
        """Data on the stream, as far as the windows let it go now; the rest as they open."""
        if stream.local_closed or not len(data):
            return
        if not stream.pending:
            size = len(data)
            if size <= self.send_window and size <= stream.send_window and size <= self.peer_frame:
                self.emit([frame(DATA, 0, stream.id, size), data])
                self.send_window -= size
                stream.send_window -= size
                return
        stream.pending.append(memoryview(data))
        stream.pending_bytes += len(data)
        self.pump(stream)

    def send_trailers(self, stream: Stream, block: bytes) -> None:
        """The trailers, ending the stream once the data before them is out."""
        if stream.local_closed:
            return
        if not stream.pending:
            self.send_headers(stream, block, end_stream=True)
            return
        stream.trailers = block

    def pump(self, stream: Stream) -> None:
        """Send what waits on the stream, as far as the windows now let it."""
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
            self.emit([frame(DATA, 0, stream.id, size), chunk])
            self.send_window -= size
            stream.send_window -= size
            stream.pending_bytes -= size
            stream.stalled_since = 0.0
        if stream.drained is not None and not stream.drained.done():
            stream.drained.set_result(None)
        if stream.trailers is not None:
            block, stream.trailers = stream.trailers, None
            self.send_headers(stream, block, end_stream=True)

    def widen(self, increment: int) -> None:
        """The connection's window grew (the client's WINDOW_UPDATE on stream 0): the streams
        that waited for it go on."""
        self.send_window += increment
        blocked, self.blocked = self.blocked, {}
        for waiting in blocked.values():
            self.pump(waiting)

    def reset(self, stream_id: int, code: int) -> None:
        """RST_STREAM: the stream ends here (its work, if any, is cancelled)."""
        self.emit([frame(RST_STREAM, 0, stream_id, 4), U32.pack(code)])
        self.history.remember_reset(stream_id, RESET_HERE)
        stream = self.streams.pop(stream_id, None)
        if stream is not None:
            self.blocked.pop(stream_id, None)
            self.cancel(stream)

    def reset_by_client(self, stream_id: int) -> bool:
        """The client's RST_STREAM: False if the stream was not open."""
        stream = self.streams.pop(stream_id, None)
        if stream is None:
            return False
        self.history.remember_reset(stream_id, RESET_BY_CLIENT)
        self.blocked.pop(stream_id, None)
        self.cancel(stream)
        return True

    def cancel(self, stream: Stream) -> None:
        stream.close()
        if stream.drained is not None and not stream.drained.done():
            stream.drained.set_result(None)
        receiver, stream.receiver = stream.receiver, None
        if receiver is not None:
            receiver.cancelled()

    def close_if_done(self, stream: Stream) -> None:
        if stream.state is CLOSED:
            self.streams.pop(stream.id, None)
            if self.blocked:  # (mostly empty: no call of pop, a generic one compiled)
                self.blocked.pop(stream.id, None)
            stream.receiver = None

    def lost(self) -> None:
        """The connection is gone: every stream's work is cancelled."""
        self.closed = True
        streams, self.streams = self.streams, {}
        for stream in streams.values():
            self.cancel(stream)

    def goaway(self, code: int, message: str = "") -> None:
        debug = message.encode()[:256]
        self.emit(
            [
                frame(GOAWAY, 0, 0, 8 + len(debug)),
                U32.pack(self.history.last_stream_id),
                U32.pack(code),
                debug,
            ]
        )
