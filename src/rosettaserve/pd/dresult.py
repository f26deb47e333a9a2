"""A decode instance's one ``GET /dresult`` stream: every request's frames, multiplexed.

One reader at a time, and the first one keeps it: a ``GET /dresult`` while a reader is
connected is refused (409, ``ReaderConnected``), so no one else takes the stream over, fails
the requests in flight or reads other users' tokens. (MindIE's D lets the new reader replace
the old one with ``close:``; a scheduler that restarts is not held up by the rule, since its
old connection closes with its process.) Frames queued together leave as one chunk. After
``heartbeat`` seconds without a frame, ``ka:heartbeat\\0`` goes out. When the reader goes away,
``on_lost`` runs (the decode instance drops the requests whose frames would go nowhere).

A reader counts from the moment its stream starts (the response head is on its way), not when
the stream is made: a stream that is never sent (a HEAD, a connection lost first) holds
nothing.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable

from rosettaserve.core.errors import ServingError
from rosettaserve.core.status import ErrorKind
from rosettaserve.core.timeouts import within
from rosettaserve.pd.wire import KEEPALIVE


class ReaderConnected(ServingError):
    kind = ErrorKind.ALREADY_EXISTS


class DResultHub:
    def __init__(self, heartbeat: float, on_lost: Callable[[], None]) -> None:
        self.heartbeat = heartbeat
        self.on_lost = on_lost
        self._current: asyncio.Queue[bytes | None] | None = None
        self.connections = 0  # readers that ever connected
        self.refused = 0  # readers refused: another one was connected
        self.frames = 0  # frames sent

    @property
    def connected(self) -> bool:
        return self._current is not None

    def open(self) -> AsyncIterator[bytes]:
        """The reader's stream; ReaderConnected while another reader has it."""
        if self._current is not None:
            raise self._refusal()
        return self._stream()

    def close(self) -> None:
        """End the current reader's stream (the instance is stopping)."""
        if self._current is not None:
            self._current.put_nowait(None)

    def send(self, data: bytes) -> bool:
        """Queue frames for the current reader; False when there is none."""
        if self._current is None:
            return False
        self._current.put_nowait(data)
        self.frames += 1
        return True

    def _refusal(self) -> ReaderConnected:
        self.refused += 1
        return ReaderConnected("another reader is connected to /dresult on this decode instance")

    async def _stream(self) -> AsyncIterator[bytes]:
        if self._current is not None:  # another reader's stream started after this one was made
            self.refused += 1
            return
        queue = self._current = asyncio.Queue()
        self.connections += 1
        try:
            while True:
                try:
                    item = await within(queue.get(), self.heartbeat)
                except TimeoutError:
                    yield KEEPALIVE
                    continue
                items = [item]
                while not queue.empty() and items[-1] is not None:
                    items.append(queue.get_nowait())
                ended = items[-1] is None
                data = b"".join(i for i in items if i is not None)
                if data:
                    yield data
                if ended:
                    return
        finally:
            if self._current is queue:
                self._current = None
                self.on_lost()
