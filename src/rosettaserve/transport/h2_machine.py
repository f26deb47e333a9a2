"""An HTTP/2 connection's reading side (RFC 9113), apart from I/O: bytes in, frame by frame.

``receive`` takes the bytes a client sent and handles each whole frame through a dispatch table
(frame type -> handler, built once per connection; a frame of a type it does not know is ignored,
RFC 9113 5.5). Streams start and end here as the client's frames say (their states: ``h2_stream``),
the request's data goes to the stream's receiver, the connection's and streams' receive windows are
reopened as they are used, and the client's SETTINGS, WINDOW_UPDATE and RST_STREAM reach the
sending side (``h2_sender``), which queues every frame the server answers with. A stream error
resets the stream, and the connection goes on; a connection error (``ConnectionFailure``) is
raised to the connection (``h2``), which sends GOAWAY and closes.

Limits are checked on the frame header, before a frame's payload is buffered: a frame above the
advertised SETTINGS_MAX_FRAME_SIZE, a header block above the header-list limit, more streams than
SETTINGS_MAX_CONCURRENT_STREAMS, data beyond a flow-control window.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final, Protocol

from rosettaserve.transport.h2_fields import NO_LENGTH, request_fault, trailer_fault
from rosettaserve.transport.h2_sender import Sender
from rosettaserve.transport.h2_stream import Receiver, Stream, count_length
from rosettaserve.transport.h2_wire import (
    ACK,
    COMPRESSION_ERROR,
    CONCURRENT_STREAMS,
    CONNECTION_WINDOW,
    CONTINUATION,
    DATA,
    DEFAULT_FRAME,
    DEFAULT_WINDOW,
    ENABLE_PUSH,
    END_HEADERS,
    END_STREAM,
    ENHANCE_YOUR_CALM,
    FLOW_CONTROL_ERROR,
    FRAME_LIMIT,
    FRAME_SIZE_ERROR,
    GOAWAY,
    HEADER_LIST_LIMIT,
    HEADERS,
    INITIAL_WINDOW_SIZE,
    MAX_FRAME_SIZE,
    MAX_WINDOW,
    PADDED,
    PING,
    PRIORITY,
    PRIORITY_FLAG,
    PROTOCOL_ERROR,
    PUSH_PROMISE,
    REFUSED_STREAM,
    RST_STREAM,
    SETTING,
    SETTINGS,
    STREAM_CLOSED,
    STREAM_WINDOW,
    U32,
    WINDOW_UPDATE,
    ConnectionFailure,
    StreamError,
    check_priority,
    frame,
    unpad,
)
from rosettaserve.transport.hpack import Decoder, HpackError

# beyond this many client resets, when they are most of its streams: GOAWAY
RESET_LIMIT: Final = 1000

Handler = Callable[[int, int, bytes], None]


class Opener(Protocol):
    """Where the streams a client starts go (the connection, and through it the application)."""

    def open_stream(self, stream: Stream, headers: list[tuple[str, str]]) -> Receiver:
        """What receives the stream (it may answer, or reset it, at once)."""


class H2Machine:
    """What a client's frames do to its connection: streams opened, data received, windows."""

    def __init__(self, sender: Sender, opener: Opener) -> None:
        self.sender = sender
        self.opener = opener
        self.decoder = Decoder(max_header_list_size=HEADER_LIST_LIMIT)
        self.need = 9  # bytes of the next frame, as far as known
        self.peer_window = DEFAULT_WINDOW  # the client's SETTINGS_INITIAL_WINDOW_SIZE
        self.recv_window = CONNECTION_WINDOW
        self.recv_unacked = 0
        self.header_stream = 0  # a header block continues on this stream (CONTINUATION)
        self.header_fragments: list[bytes] = []
        self.header_size = 0
        self.header_end_stream = False
        self.header_fault = ""  # the HEADERS frame is a stream error, once its block is decoded
        self.going_away = False  # either side is going away (GOAWAY): new streams are refused
        self.opened = 0  # streams the client started
        self.client_resets = 0  # of them, those it reset while they were open
        # frame type -> handler (RFC 9113 6), indexed by the type; types beyond it are not
        # known: ignored. Bound once, here: a frame costs an index and a call.
        table: dict[int, Handler] = {
            DATA: self._data,
            HEADERS: self._headers,
            PRIORITY: self._priority,
            RST_STREAM: self._rst_stream,
            SETTINGS: self._settings,
            PUSH_PROMISE: self._push_promise,
            PING: self._ping,
            GOAWAY: self._goaway,
            WINDOW_UPDATE: self._window_update,
            CONTINUATION: self._continuation,
        }
        self.handlers: list[Handler] = [table[kind] for kind in range(len(table))]

    def receive(self, data: bytes, pos: int) -> int:
        """Handle the whole frames of ``data`` from ``pos``: where the rest begins (``need``:
        how much of the next frame is needed to handle it)."""
        size = len(data)
        handlers = self.handlers
        while size - pos >= 9:
            length = (data[pos] << 16) | (data[pos + 1] << 8) | data[pos + 2]
            if length > FRAME_LIMIT:
                raise ConnectionFailure(
                    FRAME_SIZE_ERROR, f"a frame of {length} bytes, above the {FRAME_LIMIT} limit"
                )
            end = pos + 9 + length
            if end > size:
                self.need = end - pos
                return pos
            kind = data[pos + 3]
            if self.header_stream and kind != CONTINUATION:
                raise ConnectionFailure(PROTOCOL_ERROR, "a header block was interrupted by a frame")
            if kind < len(handlers):  # frames of unknown types are ignored (RFC 9113 5.5)
                stream_id = U32.unpack_from(data, pos + 5)[0] & 0x7FFFFFFF
                try:
                    handlers[kind](data[pos + 4], stream_id, data[pos + 9 : end])
                except StreamError as exc:
                    self.sender.reset(exc.stream_id, exc.code)
                if self.sender.closed:
                    return size
            pos = end
        self.need = 9
        return pos

    # -- streams and their data ----------------------------------------------------------------

    def _data(self, flags: int, stream_id: int, payload: bytes) -> None:
        if stream_id == 0:
            raise ConnectionFailure(PROTOCOL_ERROR, "DATA on stream 0")
        size = len(payload)
        self.recv_window -= size
        if self.recv_window < 0:
            raise ConnectionFailure(FLOW_CONTROL_ERROR, "DATA beyond the connection's window")
        self._consumed(size)  # buffered or dropped at once: the connection's window reopens
        sender = self.sender
        stream = sender.streams.get(stream_id)
        if stream is None:
            sender.history.not_open(DATA, stream_id)
            return
        if stream.remote_closed:
            raise StreamError(stream_id, STREAM_CLOSED, "DATA after the end of the stream")
        stream.received += size  # the request's pace: the sweep compares (h2_stalls)
        stream.recv_window -= size
        if stream.recv_window < 0:
            raise StreamError(stream_id, FLOW_CONTROL_ERROR, "DATA beyond the stream's window")
        if flags & PADDED:
            payload = unpad(payload, stream_id)
        end_stream = bool(flags & END_STREAM)
        if stream.length != NO_LENGTH:
            count_length(stream, len(payload), end_stream)
        if end_stream:
            stream.end_remote()
        else:
            stream.recv_unacked += size
            if stream.recv_unacked >= STREAM_WINDOW // 2 and not stream.held:
                self._reopen(stream)
        if stream.receiver is not None:
            stream.receiver.received(payload, end_stream)
        sender.close_if_done(stream)

    def _reopen(self, stream: Stream) -> None:
        """Give the client back the stream's window it used."""
        self.sender.emit([frame(WINDOW_UPDATE, 0, stream.id, 4), U32.pack(stream.recv_unacked)])
        stream.recv_window += stream.recv_unacked
        stream.recv_unacked = 0

    def hold(self, stream: Stream, held: bool) -> None:
        """While held, the stream's window is not reopened: a client sending faster than the
        application reads stops once it has used the window, instead of filling memory."""
        stream.held = held
        if not held and stream.recv_unacked and not stream.remote_closed:
            self._reopen(stream)

    def _consumed(self, size: int) -> None:
        self.recv_unacked += size
        if self.recv_unacked >= CONNECTION_WINDOW // 2:
            self.sender.emit([frame(WINDOW_UPDATE, 0, 0, 4), U32.pack(self.recv_unacked)])
            self.recv_window += self.recv_unacked
            self.recv_unacked = 0

    def _headers(self, flags: int, stream_id: int, payload: bytes) -> None:
        if stream_id == 0:
            raise ConnectionFailure(PROTOCOL_ERROR, "HEADERS on stream 0")
        if flags & PADDED:
            payload = unpad(payload, stream_id)
        self.header_fault = ""
        if flags & PRIORITY_FLAG:
            if len(payload) < 5:
                raise ConnectionFailure(FRAME_SIZE_ERROR, "a HEADERS frame too short")
            if U32.unpack_from(payload)[0] & 0x7FFFFFFF == stream_id:
                self.header_fault = "a stream cannot depend on itself"  # RFC 9113 5.3.1
            payload = payload[5:]
        self.header_end_stream = bool(flags & END_STREAM)
        if flags & END_HEADERS:
            self._header_block(stream_id, payload)
            return
        self.header_stream = stream_id
        self.header_fragments = [payload]
        self.header_size = len(payload)

    def _continuation(self, flags: int, stream_id: int, payload: bytes) -> None:
        if stream_id != self.header_stream or stream_id == 0:
            raise ConnectionFailure(PROTOCOL_ERROR, "CONTINUATION without a header block")
        self.header_size += len(payload)
        if self.header_size > HEADER_LIST_LIMIT:
            raise ConnectionFailure(
                ENHANCE_YOUR_CALM,
                f"a header block larger than {HEADER_LIST_LIMIT} bytes",
            )
        self.header_fragments.append(payload)
        if flags & END_HEADERS:
            block = b"".join(self.header_fragments)
            self.header_stream, self.header_fragments = 0, []
            self._header_block(stream_id, block)

    def _header_block(self, stream_id: int, block: bytes) -> None:
        try:
            headers = self.decoder.decode(block)  # always: the decoder's table must follow
        except HpackError as exc:
            raise ConnectionFailure(COMPRESSION_ERROR, f"header block: {exc}") from None
        end_stream = self.header_end_stream
        sender = self.sender
        stream = sender.streams.get(stream_id)
        if stream is not None:
            self._trailers(stream, headers, end_stream)
            return
        history = sender.history
        if stream_id % 2 == 0 or stream_id <= history.last_stream_id:
            history.not_open(HEADERS, stream_id)
            return
        history.opened(stream_id)
        fault, length = request_fault(headers)
        fault = self.header_fault or self.decoder.malformed or fault
        if fault or (end_stream and length > 0):
            raise StreamError(stream_id, PROTOCOL_ERROR, fault or "content-length without DATA")
        if self.going_away:
            raise StreamError(stream_id, REFUSED_STREAM, "the server is shutting down")
        if len(sender.streams) >= CONCURRENT_STREAMS:
            raise StreamError(stream_id, REFUSED_STREAM, "too many concurrent streams")
        self.opened += 1
        stream = Stream(stream_id, self.peer_window)
        stream.open(end_stream)
        stream.length = length
        sender.streams[stream_id] = stream
        receiver = self.opener.open_stream(stream, headers)
        if stream.id in sender.streams:  # not reset by ``open_stream``
            stream.receiver = receiver
            if end_stream:
                receiver.received(b"", True)
        sender.close_if_done(stream)

    def _trailers(self, stream: Stream, headers: list[tuple[str, str]], end_stream: bool) -> None:
        """A second header block on an open stream: the request's trailers."""
        stream_id = stream.id
        if stream.remote_closed:
            raise StreamError(stream_id, STREAM_CLOSED, "HEADERS after the end of the stream")
        if not end_stream:  # RFC 9113 8.1: trailers end the stream
            raise StreamError(stream_id, PROTOCOL_ERROR, "HEADERS in the middle of a stream")
        fault = self.header_fault or self.decoder.malformed or trailer_fault(headers)
        if fault:
            raise StreamError(stream_id, PROTOCOL_ERROR, fault)
        if stream.length > 0:
            raise StreamError(stream_id, PROTOCOL_ERROR, "less DATA than its content-length")
        stream.end_remote()
        if stream.receiver is not None:
            stream.receiver.received(b"", True)
        self.sender.close_if_done(stream)

    def _rst_stream(self, flags: int, stream_id: int, payload: bytes) -> None:
        if len(payload) != 4:
            raise ConnectionFailure(FRAME_SIZE_ERROR, "a RST_STREAM must carry 4 bytes")
        last = self.sender.history.last_stream_id
        if stream_id == 0 or stream_id % 2 == 0 or stream_id > last:
            raise ConnectionFailure(PROTOCOL_ERROR, f"RST_STREAM on idle stream {stream_id}")
        if self.sender.reset_by_client(stream_id):
            self.client_resets += 1
            if self.client_resets > RESET_LIMIT and self.client_resets * 2 > self.opened:
                # opening streams only to reset them makes the server start and drop work at
                # the client's pace ("rapid reset"): such a client is told to go away
                raise ConnectionFailure(ENHANCE_YOUR_CALM, "too many streams reset by the client")

    def _priority(self, flags: int, stream_id: int, payload: bytes) -> None:
        check_priority(stream_id, payload)

    def _push_promise(self, flags: int, stream_id: int, payload: bytes) -> None:
        raise ConnectionFailure(PROTOCOL_ERROR, "a client may not push")

    # -- the connection ------------------------------------------------------------------------

    def _settings(self, flags: int, stream_id: int, payload: bytes) -> None:
        if stream_id != 0:
            raise ConnectionFailure(PROTOCOL_ERROR, "SETTINGS on a stream")
        if flags & ACK:
            if payload:
                raise ConnectionFailure(FRAME_SIZE_ERROR, "a SETTINGS ACK with a payload")
            return
        if len(payload) % 6:
            raise ConnectionFailure(FRAME_SIZE_ERROR, "a SETTINGS payload not a multiple of 6")
        sender = self.sender
        for pos in range(0, len(payload), 6):
            key, value = SETTING.unpack_from(payload, pos)
            if key == INITIAL_WINDOW_SIZE:
                if value > MAX_WINDOW:
                    raise ConnectionFailure(FLOW_CONTROL_ERROR, "SETTINGS_INITIAL_WINDOW_SIZE")
                delta, self.peer_window = value - self.peer_window, value
                for stream in sender.streams.values():
                    stream.send_window += delta
                    if stream.send_window > MAX_WINDOW:
                        raise ConnectionFailure(FLOW_CONTROL_ERROR, "a stream's window overflowed")
            elif key == MAX_FRAME_SIZE:
                if not DEFAULT_FRAME <= value < 1 << 24:
                    raise ConnectionFailure(PROTOCOL_ERROR, "SETTINGS_MAX_FRAME_SIZE out of range")
                sender.peer_frame = value
            elif key == ENABLE_PUSH and value > 1:
                raise ConnectionFailure(PROTOCOL_ERROR, "SETTINGS_ENABLE_PUSH must be 0 or 1")
            # the encoder uses no dynamic table: SETTINGS_HEADER_TABLE_SIZE needs nothing
        sender.emit([frame(SETTINGS, ACK, 0, 0)])
        for stream in list(sender.streams.values()):
            if stream.pending or stream.trailers is not None:
                sender.pump(stream)

    def _window_update(self, flags: int, stream_id: int, payload: bytes) -> None:
        if len(payload) != 4:
            raise ConnectionFailure(FRAME_SIZE_ERROR, "a WINDOW_UPDATE must carry 4 bytes")
        increment = U32.unpack(payload)[0] & 0x7FFFFFFF
        sender = self.sender
        if stream_id == 0:
            if increment == 0:
                raise ConnectionFailure(PROTOCOL_ERROR, "a WINDOW_UPDATE of 0")
            if sender.send_window + increment > MAX_WINDOW:
                raise ConnectionFailure(FLOW_CONTROL_ERROR, "the connection's window overflowed")
            sender.widen(increment)
            return
        stream = sender.streams.get(stream_id)
        if stream is None:
            if stream_id % 2 == 0 or stream_id > sender.history.last_stream_id:
                raise ConnectionFailure(PROTOCOL_ERROR, f"WINDOW_UPDATE on idle stream {stream_id}")
            return  # a closed stream's: allowed
        if increment == 0:
            raise StreamError(stream_id, PROTOCOL_ERROR, "a WINDOW_UPDATE of 0")
        stream.send_window += increment
        if stream.send_window > MAX_WINDOW:
            raise StreamError(stream_id, FLOW_CONTROL_ERROR, "the stream's window overflowed")
        sender.pump(stream)

    def _ping(self, flags: int, stream_id: int, payload: bytes) -> None:
        if stream_id != 0:
            raise ConnectionFailure(PROTOCOL_ERROR, "PING on a stream")
        if len(payload) != 8:
            raise ConnectionFailure(FRAME_SIZE_ERROR, "a PING frame must carry 8 bytes")
        if not flags & ACK:
            self.sender.emit([frame(PING, ACK, 0, 8), payload])

    def _goaway(self, flags: int, stream_id: int, payload: bytes) -> None:
        if stream_id != 0:
            raise ConnectionFailure(PROTOCOL_ERROR, "GOAWAY on a stream")
        if len(payload) < 8:
            raise ConnectionFailure(FRAME_SIZE_ERROR, "a GOAWAY frame shorter than 8 bytes")
        self.going_away = True
