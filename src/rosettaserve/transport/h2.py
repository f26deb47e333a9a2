"""HTTP/2 connections (RFC 9113) on the event loop: what a client sends, frame by frame.

The gRPC transport (``transport/grpc.py``) sits on top: it opens a ``Receiver`` for each stream
a client starts and answers through ``send_headers`` / ``send_data`` / ``send_trailers``. Only
what a server needs is here: no push, no priorities (read and ignored), no h2c upgrade (gRPC
clients open with the connection preface; an HTTP/1.1 request gets a plain-text 400). The server's
preface (its SETTINGS) waits for the client's (RFC 9113 3.4 allows it): an HTTP/1.1 client is
answered in HTTP/1.1 from the first byte.

The protocol's vocabulary (frame types, codes, settings, what this server advertises) is in
``h2_wire``; a stream's state and the application's side of it in ``h2_stream``; what is sent
(frames out as the client's windows allow, resets, GOAWAY, the close, the sweep's checks) in
``h2_sender``, the base class of ``Connection``; the listening port, its idle sweep and shutdown
in ``h2_server``. A malformed request (``h2_fields``; the
characters of its fields: ``hpack``) is reset with PROTOCOL_ERROR, and the connection goes on;
the errors RFC 9113 names for a frame are those answered, connection errors with a GOAWAY
carrying the RFC's code, then a close.

Limits are checked on the frame header, before a frame's payload is buffered: a frame above the
advertised SETTINGS_MAX_FRAME_SIZE, a header block above the header-list limit, more streams than
SETTINGS_MAX_CONCURRENT_STREAMS, data beyond a flow-control window. Answers of one round of
reads leave together (``coalesce``), as over HTTP/1.1.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any, Final

from rosettaserve.transport.h2_fields import NO_LENGTH, request_fault, trailer_fault
from rosettaserve.transport.h2_sender import Sender
from rosettaserve.transport.h2_stream import (
    RESET_BY_CLIENT,
    Stream,
    count_length,
)
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
    INTERNAL_ERROR,
    MAX_FRAME_SIZE,
    MAX_WINDOW,
    PADDED,
    PING,
    PREFACE,
    PRIORITY,
    PRIORITY_FLAG,
    PROTOCOL_ERROR,
    PUSH_PROMISE,
    REFUSED_STREAM,
    RST_STREAM,
    SERVER_PREFACE,
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
from rosettaserve.transport.sockets import no_delay

if TYPE_CHECKING:
    from rosettaserve.transport.h2_server import H2Server

log = logging.getLogger("rosettaserve.grpc")

# beyond this many client resets, when they are most of its streams: GOAWAY
RESET_LIMIT: Final = 1000
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


class Connection(Sender):
    """One client's connection: frames read here, sent by ``Sender``."""

    def __init__(self, server: H2Server) -> None:
        super().__init__(server)
        self.decoder = Decoder(max_header_list_size=HEADER_LIST_LIMIT)
        self.preface = True  # the client's preface is still to come
        self.chunks: list[bytes] = []  # what arrived and is not parsed yet
        self.have = 0
        self.need = 1  # the first bytes tell HTTP/2 (its preface) from HTTP/1.1
        self.peer_window = DEFAULT_WINDOW  # the client's SETTINGS_INITIAL_WINDOW_SIZE
        self.recv_window = CONNECTION_WINDOW
        self.recv_unacked = 0
        self.header_stream = 0  # a header block continues on this stream (CONTINUATION)
        self.header_fragments: list[bytes] = []
        self.header_size = 0
        self.header_end_stream = False
        self.header_fault = ""  # the HEADERS frame is a stream error, once its block is decoded
        self.going_away = False
        self.opened = 0  # streams the client started
        self.client_resets = 0  # of them, those it reset while they were open

    # -- asyncio.Protocol ----------------------------------------------------------------------

    def connection_made(self, transport: Any) -> None:
        """Nothing is written yet: the server's preface answers the client's (``_parse``)."""
        self.transport = transport
        no_delay(transport)
        self.server.connections.add(self)
        transport.set_write_buffer_limits(high=WRITE_BUFFER_HIGH)

    def connection_lost(self, exc: Exception | None) -> None:
        self.server.connections.discard(self)
        self.transport = None
        streams, self.streams = self.streams, {}
        for stream in streams.values():
            self._cancel(stream)
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
            self._emit([SERVER_PREFACE])
            pos = len(PREFACE)
        size = len(data)
        while size - pos >= 9:
            length = (data[pos] << 16) | (data[pos + 1] << 8) | data[pos + 2]
            if length > FRAME_LIMIT:
                raise ConnectionFailure(
                    FRAME_SIZE_ERROR, f"a frame of {length} bytes, above the {FRAME_LIMIT} limit"
                )
            end = pos + 9 + length
            if end > size:
                self.need = end - pos
                return data[pos:]
            kind, flags = data[pos + 3], data[pos + 4]
            stream_id = U32.unpack_from(data, pos + 5)[0] & 0x7FFFFFFF
            try:
                self._frame(kind, flags, stream_id, data[pos + 9 : end])
            except StreamError as exc:
                self.reset(exc.stream_id, exc.code)
            if self.transport is None:
                return b""
            pos = end
        self.need = 9
        return data[pos:]

    def _frame(self, kind: int, flags: int, stream_id: int, payload: bytes) -> None:
        if self.header_stream and kind != CONTINUATION:
            raise ConnectionFailure(PROTOCOL_ERROR, "a header block was interrupted by a frame")
        if kind == DATA:
            self._data(flags, stream_id, payload)
        elif kind == HEADERS:
            self._headers(flags, stream_id, payload)
        elif kind == CONTINUATION:
            self._continuation(flags, stream_id, payload)
        elif kind == SETTINGS:
            self._settings(flags, stream_id, payload)
        elif kind == WINDOW_UPDATE:
            self._window_update(stream_id, payload)
        elif kind == PING:
            if stream_id != 0:
                raise ConnectionFailure(PROTOCOL_ERROR, "PING on a stream")
            if len(payload) != 8:
                raise ConnectionFailure(FRAME_SIZE_ERROR, "a PING frame must carry 8 bytes")
            if not flags & ACK:
                self._emit([frame(PING, ACK, 0, 8), payload])
        elif kind == RST_STREAM:
            self._rst_stream(stream_id, payload)
        elif kind == PRIORITY:
            check_priority(stream_id, payload)
        elif kind == GOAWAY:
            if stream_id != 0:
                raise ConnectionFailure(PROTOCOL_ERROR, "GOAWAY on a stream")
            if len(payload) < 8:
                raise ConnectionFailure(FRAME_SIZE_ERROR, "a GOAWAY frame shorter than 8 bytes")
            self.going_away = True
        elif kind == PUSH_PROMISE:
            raise ConnectionFailure(PROTOCOL_ERROR, "a client may not push")
        # frames of unknown types are ignored (RFC 9113, 5.5)

    def _data(self, flags: int, stream_id: int, payload: bytes) -> None:
        if stream_id == 0:
            raise ConnectionFailure(PROTOCOL_ERROR, "DATA on stream 0")
        size = len(payload)
        self.recv_window -= size
        if self.recv_window < 0:
            raise ConnectionFailure(FLOW_CONTROL_ERROR, "DATA beyond the connection's window")
        self._consumed(size)  # buffered or dropped at once: the connection's window reopens
        stream = self.streams.get(stream_id)
        if stream is None:
            self.history.not_open(DATA, stream_id)
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
            stream.remote_closed = True
        else:
            stream.recv_unacked += size
            if stream.recv_unacked >= STREAM_WINDOW // 2 and not stream.held:
                self._reopen(stream)
        if stream.receiver is not None:
            stream.receiver.received(payload, end_stream)
        self._close_if_done(stream)

    def _reopen(self, stream: Stream) -> None:
        """Give the client back the stream's window it used."""
        self._emit([frame(WINDOW_UPDATE, 0, stream.id, 4), U32.pack(stream.recv_unacked)])
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
            self._emit([frame(WINDOW_UPDATE, 0, 0, 4), U32.pack(self.recv_unacked)])
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
        stream = self.streams.get(stream_id)
        if stream is not None:
            self._trailers(stream, headers, end_stream)
            return
        if stream_id % 2 == 0 or stream_id <= self.history.last_stream_id:
            self.history.not_open(HEADERS, stream_id)
            return
        self.history.opened(stream_id)
        fault, length = request_fault(headers)
        fault = self.header_fault or self.decoder.malformed or fault
        if fault or (end_stream and length > 0):
            raise StreamError(stream_id, PROTOCOL_ERROR, fault or "content-length without DATA")
        if self.going_away or self.server.closing:
            raise StreamError(stream_id, REFUSED_STREAM, "the server is shutting down")
        if len(self.streams) >= CONCURRENT_STREAMS:
            raise StreamError(stream_id, REFUSED_STREAM, "too many concurrent streams")
        self.opened += 1
        stream = Stream(stream_id, self.peer_window)
        stream.remote_closed = end_stream
        stream.length = length
        self.streams[stream_id] = stream
        receiver = self.server.app.open(self, stream, headers)
        if stream.id in self.streams:  # not reset by ``open``
            stream.receiver = receiver
            if end_stream:
                receiver.received(b"", True)
        self._close_if_done(stream)

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
        stream.remote_closed = True
        if stream.receiver is not None:
            stream.receiver.received(b"", True)
        self._close_if_done(stream)

    def _settings(self, flags: int, stream_id: int, payload: bytes) -> None:
        if stream_id != 0:
            raise ConnectionFailure(PROTOCOL_ERROR, "SETTINGS on a stream")
        if flags & ACK:
            if payload:
                raise ConnectionFailure(FRAME_SIZE_ERROR, "a SETTINGS ACK with a payload")
            return
        if len(payload) % 6:
            raise ConnectionFailure(FRAME_SIZE_ERROR, "a SETTINGS payload not a multiple of 6")
        for pos in range(0, len(payload), 6):
            key, value = SETTING.unpack_from(payload, pos)
            if key == INITIAL_WINDOW_SIZE:
                if value > MAX_WINDOW:
                    raise ConnectionFailure(FLOW_CONTROL_ERROR, "SETTINGS_INITIAL_WINDOW_SIZE")
                delta, self.peer_window = value - self.peer_window, value
                for stream in self.streams.values():
                    stream.send_window += delta
                    if stream.send_window > MAX_WINDOW:
                        raise ConnectionFailure(FLOW_CONTROL_ERROR, "a stream's window overflowed")
            elif key == MAX_FRAME_SIZE:
                if not DEFAULT_FRAME <= value < 1 << 24:
                    raise ConnectionFailure(PROTOCOL_ERROR, "SETTINGS_MAX_FRAME_SIZE out of range")
                self.peer_frame = value
            elif key == ENABLE_PUSH and value > 1:
                raise ConnectionFailure(PROTOCOL_ERROR, "SETTINGS_ENABLE_PUSH must be 0 or 1")
            # the encoder uses no dynamic table: SETTINGS_HEADER_TABLE_SIZE needs nothing
        self._emit([frame(SETTINGS, ACK, 0, 0)])
        for stream in list(self.streams.values()):
            if stream.pending or stream.trailers is not None:
                self._pump(stream)

    def _window_update(self, stream_id: int, payload: bytes) -> None:
        if len(payload) != 4:
            raise ConnectionFailure(FRAME_SIZE_ERROR, "a WINDOW_UPDATE must carry 4 bytes")
        increment = U32.unpack(payload)[0] & 0x7FFFFFFF
        if stream_id == 0:
            if increment == 0:
                raise ConnectionFailure(PROTOCOL_ERROR, "a WINDOW_UPDATE of 0")
            self.send_window += increment
            if self.send_window > MAX_WINDOW:
                raise ConnectionFailure(FLOW_CONTROL_ERROR, "the connection's window overflowed")
            blocked, self.blocked = self.blocked, {}
            for waiting in blocked.values():
                self._pump(waiting)
            return
        stream = self.streams.get(stream_id)
        if stream is None:
            if stream_id % 2 == 0 or stream_id > self.history.last_stream_id:
                raise ConnectionFailure(PROTOCOL_ERROR, f"WINDOW_UPDATE on idle stream {stream_id}")
            return  # a closed stream's: allowed
        if increment == 0:
            raise StreamError(stream_id, PROTOCOL_ERROR, "a WINDOW_UPDATE of 0")
        stream.send_window += increment
        if stream.send_window > MAX_WINDOW:
            raise StreamError(stream_id, FLOW_CONTROL_ERROR, "the stream's window overflowed")
        self._pump(stream)

    def _rst_stream(self, stream_id: int, payload: bytes) -> None:
        if len(payload) != 4:
            raise ConnectionFailure(FRAME_SIZE_ERROR, "a RST_STREAM must carry 4 bytes")
        if stream_id == 0 or stream_id % 2 == 0 or stream_id > self.history.last_stream_id:
            raise ConnectionFailure(PROTOCOL_ERROR, f"RST_STREAM on idle stream {stream_id}")
        stream = self.streams.pop(stream_id, None)
        if stream is not None:
            self.history.remember_reset(stream_id, RESET_BY_CLIENT)
            self.blocked.pop(stream_id, None)
            self._cancel(stream)
            self.client_resets += 1
            if self.client_resets > RESET_LIMIT and self.client_resets * 2 > self.opened:
                # opening streams only to reset them makes the server start and drop work at
                # the client's pace ("rapid reset"): such a client is told to go away
                raise ConnectionFailure(ENHANCE_YOUR_CALM, "too many streams reset by the client")

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
        self._emit([SERVER_PREFACE])  # a GOAWAY is no server's first frame
        self.fail(PROTOCOL_ERROR, "the connection did not start with the HTTP/2 preface")
