"""One HTTP/2 stream as its connection keeps it: its state (RFC 9113 5.1, ``StreamState``: the
transitions are ``Stream``'s methods, and nowhere else), its flow-control windows, what is
queued for the client; what the connection remembers of the streams no longer open
(``StreamHistory``); and the application's side of a stream (a ``Receiver``).
"""

from __future__ import annotations

import asyncio
import math
from collections import deque
from enum import Enum
from typing import Final, Protocol

from rosettaserve.transport.h2_fields import NO_LENGTH
from rosettaserve.transport.h2_wire import (
    DATA,
    PROTOCOL_ERROR,
    STREAM_CLOSED,
    STREAM_WINDOW,
    ConnectionFailure,
    StreamError,
)

RESET_MEMORY: Final = 512  # reset streams remembered, twice this many at most (their late frames)
SKIP_MEMORY: Final = 64  # ranges of stream ids a client skipped (never opened), remembered
# how a stream that is no longer open ended, as remembered for the frames that may follow
RESET_HERE: Final = 1
RESET_BY_CLIENT: Final = 2
# a stream's body clock (``body_due``) when it is not a time: to be started by the sweep, or
# not running (a streaming call between two messages: the client sends when it likes)
CLOCK_TO_START: Final = -math.inf
CLOCK_STOPPED: Final = math.inf


class Receiver(Protocol):
    """The application's side of one stream."""

    def received(self, data: bytes, end_stream: bool) -> None:
        """Data from the client (``end_stream``: the last of it)."""

    def cancelled(self) -> None:
        """The client reset the stream, or the connection went away."""

    def late(self, reason: str) -> None:
        """The request's data came too slowly (``body_pace``): answer, if it can; the stream is
        reset next."""


class StreamState(Enum):
    """A stream's state (RFC 9113 5.1) as a server without push sees it: no "reserved" state."""

    IDLE = "idle"
    OPEN = "open"
    HALF_CLOSED_REMOTE = "half-closed (remote)"  # the client sent END_STREAM
    HALF_CLOSED_LOCAL = "half-closed (local)"  # the server sent END_STREAM
    CLOSED = "closed"


# the states as C statics, compiled: compared by identity, no lookup on the enum class
IDLE: Final = StreamState.IDLE
OPEN: Final = StreamState.OPEN
HALF_CLOSED_REMOTE: Final = StreamState.HALF_CLOSED_REMOTE
HALF_CLOSED_LOCAL: Final = StreamState.HALF_CLOSED_LOCAL
CLOSED: Final = StreamState.CLOSED


class Stream:
    __slots__ = (
        "body_due",
        "body_quiet_since",
        "body_seen",
        "drained",
        "held",
        "id",
        "length",
        "pending",
        "pending_bytes",
        "received",
        "receiver",
        "recv_unacked",
        "recv_window",
        "send_window",
        "stalled_since",
        "state",
        "trailers",
    )

    def __init__(self, stream_id: int, send_window: int) -> None:
        self.id = stream_id
        self.state: StreamState = IDLE
        self.send_window = send_window
        self.recv_window = STREAM_WINDOW
        self.recv_unacked = 0
        self.held = False  # the application asked that the window stay as it is
        self.receiver: Receiver | None = None
        self.pending: deque[memoryview] = deque()  # data waiting for a window
        self.pending_bytes = 0
        self.trailers: bytes | None = None  # sent once ``pending`` is out
        self.stalled_since = 0.0  # the sweep saw ``pending`` not moving from then (0: moving)
        self.drained: asyncio.Future[None] | None = None
        self.length = NO_LENGTH  # what the request's content-length says is still to come
        # the request's pace (``h2_stalls.late_bodies``): DATA bytes received, the clock
        # (``body_pace``), and the sweep's last look: bytes seen, and since when unchanged
        self.received = 0
        self.body_due = CLOCK_TO_START
        self.body_seen = 0
        self.body_quiet_since = 0.0

    # -- the transitions of RFC 9113 5.1 (a server's: the client opens, either side ends) -------

    def open(self, end_stream: bool) -> None:
        """The client's HEADERS: idle -> open, or half-closed (remote) with END_STREAM."""
        self.state = HALF_CLOSED_REMOTE if end_stream else OPEN

    def end_remote(self) -> None:
        """The client's END_STREAM: open -> half-closed (remote), half-closed (local) -> closed."""
        self.state = CLOSED if self.state is HALF_CLOSED_LOCAL else HALF_CLOSED_REMOTE

    def end_local(self) -> None:
        """The server's END_STREAM: open -> half-closed (local), half-closed (remote) -> closed."""
        self.state = CLOSED if self.state is HALF_CLOSED_REMOTE else HALF_CLOSED_LOCAL

    def close(self) -> None:
        """RST_STREAM, sent or received, or the connection gone: closed from any state."""
        self.state = CLOSED

    @property
    def remote_closed(self) -> bool:
        """The client sends nothing more on it."""
        state = self.state
        return state is HALF_CLOSED_REMOTE or state is CLOSED

    @property
    def local_closed(self) -> bool:
        """The server sends nothing more on it."""
        state = self.state
        return state is HALF_CLOSED_LOCAL or state is CLOSED


def count_length(stream: Stream, size: int, end_stream: bool) -> None:
    """DATA on a stream whose request declared its content-length: no more than that, and all
    of it by the end of the stream (RFC 9113 8.1.1)."""
    left = stream.length - size
    if left < 0 or (end_stream and left):
        raise StreamError(stream.id, PROTOCOL_ERROR, "DATA that does not add up to content-length")
    stream.length = left


class StreamHistory:
    """What a connection remembers of the streams that are not open (RFC 9113 5.1): the last id
    the client opened, the ids it skipped (closed, never to be opened), and the streams reset
    lately by either side, for the frames still on their way."""

    __slots__ = ("last_stream_id", "resets", "resets_before", "skipped")

    def __init__(self) -> None:
        self.last_stream_id = 0
        # streams reset (by either side) lately: id -> RESET_HERE or RESET_BY_CLIENT, in two
        # generations of up to RESET_MEMORY each
        self.resets: dict[int, int] = {}
        self.resets_before: dict[int, int] = {}
        self.skipped: list[tuple[int, int]] = []  # (first, last) ids the client never opened

    def opened(self, stream_id: int) -> None:
        """A new stream id: those the client skipped are closed, never to be opened."""
        first = self.last_stream_id + 2 if self.last_stream_id else 1
        if stream_id > first:
            if len(self.skipped) >= SKIP_MEMORY:
                del self.skipped[0]
            self.skipped.append((first, stream_id - 2))
        self.last_stream_id = stream_id

    def not_open(self, kind: int, stream_id: int) -> None:
        """DATA or HEADERS on a stream that is not open: the error its state calls for (RFC 9113
        5.1), or nothing when the frame is only late."""
        name = "DATA" if kind == DATA else "HEADERS"
        if stream_id % 2 == 0 or stream_id > self.last_stream_id:
            raise ConnectionFailure(PROTOCOL_ERROR, f"{name} on idle stream {stream_id}")
        how = self.resets.get(stream_id, 0) or self.resets_before.get(stream_id, 0)
        if how == RESET_HERE:  # sent before the client saw our reset: ignored
            return
        if how == RESET_BY_CLIENT:
            raise StreamError(stream_id, STREAM_CLOSED, f"{name} on a stream the client reset")
        if any(first <= stream_id <= last for first, last in self.skipped):
            raise ConnectionFailure(PROTOCOL_ERROR, f"{name} on stream {stream_id}, never opened")
        raise ConnectionFailure(STREAM_CLOSED, f"{name} on closed stream {stream_id}")

    def remember_reset(self, stream_id: int, how: int) -> None:
        if len(self.resets) >= RESET_MEMORY:
            self.resets_before, self.resets = self.resets, {}
        self.resets[stream_id] = how
