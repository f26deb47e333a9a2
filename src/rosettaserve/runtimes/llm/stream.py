"""The event-loop side of a request: deltas arrive from the engine thread, in order."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterable, Mapping

from rosettaserve.core.generate import GenerateDelta

Item = GenerateDelta | BaseException
# The longest the engine thread waits for an event loop to pass a step's deltas on: a busy
# loop delays the next step by this much at most.
HANDOVER_WAIT_S = 0.02


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


def hand_over(
    outbox: Mapping[asyncio.AbstractEventLoop, list[tuple[GenerationStream, Item]]],
) -> None:
    """Hand one step's deltas to their loops (one call per loop), then wait (at most
    ``HANDOVER_WAIT_S``) until each loop has passed them on. The engine thread's next step would
    otherwise hold the interpreter while the loop formats and writes them: on a busy core the
    loop fell steps behind, wrote several tokens of a stream at once (an inter-token gap of a
    few steps, then gaps of zero) and read new requests late."""
    taken: list[threading.Event] = []
    for loop, items in outbox.items():
        event = threading.Event()
        try:
            loop.call_soon_threadsafe(_deliver, loop, items, event)
        except RuntimeError:  # that loop is closed: its requests are gone
            for stream, _ in items:
                stream.cancelled = True
        else:
            taken.append(event)
    deadline = time.monotonic() + HANDOVER_WAIT_S
    for event in taken:
        event.wait(max(0.0, deadline - time.monotonic()))


def _deliver(
    loop: asyncio.AbstractEventLoop,
    items: list[tuple[GenerationStream, Item]],
    taken: threading.Event,
) -> None:
    """On the streams' loop: queue the deltas, then tell the engine thread once the tasks they
    woke have run (they were scheduled before ``taken.set``)."""
    for stream, item in items:
        stream.put(item)
    loop.call_soon(taken.set)


def caught_up(loops: Iterable[asyncio.AbstractEventLoop], timeout: float) -> None:
    """Wait (at most ``timeout``) until each loop has run what it had ready and the tasks that
    woke meanwhile: requests whose bytes had arrived have reached the engine by then."""
    events: list[threading.Event] = []
    for loop in loops:
        event = threading.Event()
        try:
            loop.call_soon_threadsafe(_rounds, loop, 2, event)
        except RuntimeError:  # that loop is closed
            continue
        events.append(event)
    deadline = time.monotonic() + timeout
    for event in events:
        event.wait(max(0.0, deadline - time.monotonic()))


def _rounds(loop: asyncio.AbstractEventLoop, left: int, done: threading.Event) -> None:
    """``done`` is set after ``left`` more rounds of the loop."""
    if left > 0:
        loop.call_soon(_rounds, loop, left - 1, done)
    else:
        done.set()
