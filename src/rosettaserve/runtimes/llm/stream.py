"""The event-loop side of a request: deltas arrive from the engine thread, in order."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from rosettaserve.core.generate import GenerateDelta

Item = GenerateDelta | BaseException


class GenerationStream:
    """Async iterator over one request's deltas (all ``n`` sequences, interleaved).

    It ends after the last sequence's final delta. Cancelling the consuming task, calling
    ``cancel`` or dropping the stream tells the engine to stop the request's work.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop, n: int, wake: Callable[[], None]) -> None:
        self.loop = loop
        self.cancelled = False  # read by the engine thread between steps
        self._queue: asyncio.Queue[Item] = asyncio.Queue()
        self._open = n  # sequences that have not sent their final delta
        self._wake = wake

    # -- engine side (called on the event loop through call_soon_threadsafe) --------------------

    def put(self, item: Item) -> None:
        self._queue.put_nowait(item)

    # -- consumer side --------------------------------------------------------------------------

    def __aiter__(self) -> GenerationStream:
        return self

    async def __anext__(self) -> GenerateDelta:
        if self._open <= 0:
            raise StopAsyncIteration
        try:
            item = await self._queue.get()
        except BaseException:  # the consumer was cancelled (client gone): stop the work
            self.cancel()
            raise
        if isinstance(item, BaseException):
            self._open = 0
            raise item
        if item.finish_reason is not None:
            self._open -= 1
        return item

    @property
    def done(self) -> bool:
        return self._open <= 0

    def cancel(self) -> None:
        if not self.cancelled and self._open > 0:
            self.cancelled = True
            self._wake()

    def __del__(self) -> None:
        if not self.cancelled and self._open > 0:
            self.cancelled = True  # never consumed to the end: let the engine drop it
