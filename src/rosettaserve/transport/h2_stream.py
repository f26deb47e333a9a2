"""One HTTP/2 stream's state as its connection (``h2``) keeps it: its flow-control windows,
what is queued for the client, how far each side has closed it; and the application's side of a
stream (``App`` opens a ``Receiver`` for each one a client starts).
"""

from __future__ import annotations

import asyncio
from collections import deque
from typing import TYPE_CHECKING, Protocol

from rosettaserve.transport.h2_fields import NO_LENGTH
from rosettaserve.transport.h2_wire import PROTOCOL_ERROR, STREAM_WINDOW, StreamError

if TYPE_CHECKING:
    from rosettaserve.transport.h2 import Connection


class Receiver(Protocol):
    """The application's side of one stream."""

    def received(self, data: bytes, end_stream: bool) -> None:
        """Data from the client (``end_stream``: the last of it)."""

    def cancelled(self) -> None:
        """The client reset the stream, or the connection went away."""


class App(Protocol):
    def open(self, conn: Connection, stream: Stream, headers: list[tuple[str, str]]) -> Receiver:
        """A stream the client started: what receives it (it may answer at once)."""


class Stream:
    __slots__ = (
        "drained",
        "held",
        "id",
        "length",
        "local_closed",
        "pending",
        "pending_bytes",
        "receiver",
        "recv_unacked",
        "recv_window",
        "remote_closed",
        "send_window",
        "trailers",
    )

    def __init__(self, stream_id: int, send_window: int) -> None:
        self.id = stream_id
        self.send_window = send_window
        self.recv_window = STREAM_WINDOW
        self.recv_unacked = 0
        self.held = False  # the application asked that the window stay as it is
        self.remote_closed = False
        self.local_closed = False
        self.receiver: Receiver | None = None
        self.pending: deque[memoryview] = deque()  # data waiting for a window
        self.pending_bytes = 0
        self.trailers: bytes | None = None  # sent once ``pending`` is out
        self.drained: asyncio.Future[None] | None = None
        self.length = NO_LENGTH  # what the request's content-length says is still to come


def count_length(stream: Stream, size: int, end_stream: bool) -> None:
    """DATA on a stream whose request declared its content-length: no more than that, and all
    of it by the end of the stream (RFC 9113 8.1.1)."""
    left = stream.length - size
    if left < 0 or (end_stream and left):
        raise StreamError(stream.id, PROTOCOL_ERROR, "DATA that does not add up to content-length")
    stream.length = left
