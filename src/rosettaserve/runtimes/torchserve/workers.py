"""TorchServe's workers, as threads: each takes the first waiting request, waits up to
``max_batch_delay`` for ``batch_size`` of them (TorchServe's worker batching), and runs its own
handler instance on the batch. The event loop only queues requests and settles their answers
(one callback a frame, for the whole batch): it never waits on a handler.
"""

from __future__ import annotations

import asyncio
import queue
import threading
import time
from collections.abc import AsyncIterator

from rosettaserve.protocols.torchserve.wire import HandlerFailed, TsAnswer, TsRequest
from rosettaserve.runtimes.torchserve import frames, service
from rosettaserve.runtimes.torchserve.predict import Predictor

Event = frames.Frame | frames.Reply | None  # a failed batch, one reply, the end of a stream


class Pending:
    __slots__ = ("first", "request", "stream")

    def __init__(self, request: TsRequest, loop: asyncio.AbstractEventLoop) -> None:
        self.request = request
        self.first: asyncio.Future[Event] = loop.create_future()
        self.stream: asyncio.Queue[Event] | None = None  # made when a second event comes

    def settle(self, event: Event) -> None:
        if not self.first.done():
            self.first.set_result(event)
        else:
            if self.stream is None:
                self.stream = asyncio.Queue()
            self.stream.put_nowait(event)


class Workers:
    def __init__(
        self, handlers: list[Predictor], batch_size: int, max_batch_delay_ms: float
    ) -> None:
        self.batch_size = batch_size
        self.delay = max_batch_delay_ms / 1000
        self.inbox: queue.SimpleQueue[Pending | None] = queue.SimpleQueue()
        self.loop: asyncio.AbstractEventLoop | None = None
        self.handlers = handlers
        self.threads: list[threading.Thread] = []

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        for handler in self.handlers:
            self._spawn(handler)

    def _spawn(self, handler: Predictor) -> None:
        name = f"ts-worker-{len(self.threads)}"
        thread = threading.Thread(target=self._work, args=(handler,), name=name, daemon=True)
        thread.start()
        self.threads.append(thread)

    def stop(self) -> None:
        self.shrink(len(self.threads))

    def add(self, handler: Predictor) -> None:
        """One more worker (running once the first request started the others)."""
        self.handlers.append(handler)
        if self.loop is not None:
            self._spawn(handler)

    def shrink(self, count: int) -> None:
        """``count`` workers fewer, each once its batch in hand is done."""
        count = min(count, len(self.handlers))
        gone = self.handlers[len(self.handlers) - count :]
        del self.handlers[len(self.handlers) - count :]
        if self.loop is None:  # no thread runs them yet
            for handler in gone:
                handler.close()
            return
        for _ in range(count):
            self.inbox.put(None)

    async def serve(self, request: TsRequest) -> TsAnswer:
        loop = asyncio.get_running_loop()
        if self.loop is None:
            self.start(loop)
        pending = Pending(request, loop)
        self.inbox.put(pending)
        first = await pending.first
        if isinstance(first, frames.Frame):
            raise HandlerFailed(first.code, first.message)
        if first is None:
            raise HandlerFailed(503, "Prediction failed")
        answer = TsAnswer(first.status, first.content_type, first.headers, first.body)
        if first.headers.get("ts_stream_next") == "true":
            answer.stream = _rest_of_stream(pending)
        return answer

    def _work(self, handler: Predictor) -> None:
        while (batch := self._collect()) is not None:
            self._run(handler, batch)
        handler.close()

    def _collect(self) -> list[Pending] | None:
        first = self.inbox.get()
        if first is None:
            return None
        batch = [first]
        deadline = time.monotonic() + self.delay
        while len(batch) < self.batch_size:
            left = deadline - time.monotonic()
            try:
                more = self.inbox.get(timeout=left) if left > 0 else self.inbox.get_nowait()
            except queue.Empty:
                break
            if more is None:
                self.inbox.put(None)  # a stop: for this worker once its batch is done
                break
            batch.append(more)
        return batch

    def _run(self, handler: Predictor, batch: list[Pending]) -> None:
        assert self.loop is not None
        loop = self.loop

        def deliver(frame: frames.Frame, last: bool) -> None:
            loop.call_soon_threadsafe(_settle, batch, frame, last)

        socket = service.FrameSocket(lambda frame: deliver(frame, last=False))
        try:
            final = handler.predict([p.request for p in batch], socket)
        except Exception:  # a frame the handler broke: every request fails as one would
            final = frames.Frame(503, "Prediction failed", [])
        deliver(final, last=True)


def _settle(batch: list[Pending], frame: frames.Frame, last: bool) -> None:
    for i, pending in enumerate(batch):
        if frame.code != 200:
            pending.settle(frame)
            continue
        pending.settle(frame.replies[i] if i < len(frame.replies) else None)
        if last:
            pending.settle(None)


async def _rest_of_stream(pending: Pending) -> AsyncIterator[bytes]:
    while True:
        if pending.stream is None:
            pending.stream = asyncio.Queue()
        event = await pending.stream.get()
        if not isinstance(event, frames.Reply):
            return
        if event.body:
            yield event.body
