"""A decode instance's one ``GET /dresult`` stream: every request's frames, multiplexed.

One reader at a time (MindIE's rule): a new ``GET /dresult`` sends ``close:`` on the old stream,
ends it, and takes over. Frames queued together leave as one chunk. After ``heartbeat`` seconds
without a frame, ``ka:heartbeat\\0`` goes out. When the reader goes away and none replaces it,
``on_lost`` runs (the decode instance drops the requests whose frames would go nowhere).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable

from rosettaserve.core.timeouts import within
from rosettaserve.pd.wire import KEEPALIVE, close_frame


class DResultHub:
    def __init__(self, heartbeat: float, on_lost: Callable[[], None]) -> None:
        self.heartbeat = heartbeat
        self.on_lost = on_lost
        self._current: asyncio.Queue[bytes | None] | None = None
        self.connections = 0  # readers that ever connected
        self.frames = 0  # frames sent

    @property
    def connected(self) -> bool:
        return self._current is not None

    def open(self) -> AsyncIterator[bytes]:
        """The new reader's stream; the old reader (if any) gets ``close:`` and its stream ends."""
        old, self._current = self._current, asyncio.Queue()
        if old is not None:
            old.put_nowait(close_frame())
            old.put_nowait(None)  # the end
        self.connections += 1
        return self._stream(self._current)

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

    async def _stream(self, queue: asyncio.Queue[bytes | None]) -> AsyncIterator[bytes]:
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
