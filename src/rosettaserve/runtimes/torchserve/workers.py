"""TorchServe's workers, as threads: each takes the first waiting request, waits up to
``max_batch_delay`` for ``batch_size`` of them (TorchServe's worker batching), and runs its own
handler instance on the batch. The event loop queues requests and settles their answers (one
callback a frame, for the whole batch).

A handler in this process whose calls have been short (a running mean under ``LOOP_FACTOR``
times the invoker's ``INLINE_NS``: 1 ms by default) is called on the event loop itself when
requests are not batched (``batch_size`` 1) and one of its instances is free. In one process a
worker thread runs the handler's Python under the event loop's GIL, so the thread gains the loop
only the handler's GIL-free stretches, while handing each request over and its answer back costs
about as much CPU as a small request's handler, and two wake-ups: the bound is how long one call
may hold up the loop, not the price of the hop (a python model's ``INLINE_NS``). Only the
calls made on the event loop are timed: a worker thread's call also counts its wait for the GIL
while the loop served other requests, so under load every handler would look slow. While the
mean is over the bound (unknown at first: at it), one request in ``PROBE_EVERY`` is called on
the event loop to time it again; a slow call raises the mean and sends the next requests back to
the threads. A handler in a process of its own (``process.Remote``) is never called there: its
time is a wait on another process, which the event loop must not make. Several cores: several
server processes (``--workers``), each calling its handler on its own loop.
"""

from __future__ import annotations

import asyncio
import queue
import threading
import time
from collections.abc import AsyncIterator, Callable
from time import perf_counter_ns

from rosettaserve.core import invoker
from rosettaserve.protocols.torchserve.wire import HandlerFailed, TsAnswer, TsRequest
from rosettaserve.runtimes.torchserve import frames, service
from rosettaserve.runtimes.torchserve.predict import Predictor

Event = frames.Frame | frames.Reply | None  # a failed batch, one reply, the end of a stream
LOOP_FACTOR = 10  # the bound on a handler's mean call on the loop, in the invoker's INLINE_NS
PROBE_EVERY = 64  # while the handlers look slow, one request in this many is timed on the loop
# No probe while the calls on the threads take this many bounds (20 ms), and none ever again
# once a call on the loop took that long: a handler that waits (on a service, a disk) would
# stall every client of the loop each time it is tried there.
PROBE_CEILING = 20
Deliver = Callable[[list["Pending"], frames.Frame, bool], None]  # (batch, frame, last one?)


class Pending:
    __slots__ = ("ended", "first", "request", "stream")

    def __init__(self, request: TsRequest, loop: asyncio.AbstractEventLoop) -> None:
        self.request = request
        self.first: asyncio.Future[Event] = loop.create_future()
        self.stream: asyncio.Queue[Event] | None = None  # made when a second event comes
        self.ended = False  # the end came right after the first event (no stream was made)

    def settle(self, event: Event) -> None:
        if not self.first.done():
            self.first.set_result(event)
        elif event is None and self.stream is None:  # most answers: one reply, then the end
            self.ended = True
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
        self.mean_ns = float(LOOP_FACTOR * invoker.INLINE_NS)  # of the calls on the event loop
        self.served = 0  # requests not batched, counted for the probes
        self.thread_mean_ns = 0.0  # of the calls on the worker threads (GIL waits included)
        self.loop_off = False  # a call on the loop took PROBE_CEILING bounds: none there again
        self.probe_due = False  # a probe's turn came (it waits for a free handler)
        self.busy: dict[Predictor, threading.Lock] = {}  # held while a handler runs a batch

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        for handler in self.handlers:
            self._spawn(handler)

    def _spawn(self, handler: Predictor) -> None:
        self.busy[handler] = threading.Lock()
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
        if self.batch_size > 1 or not self._inline(pending):
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

    def _inline(self, pending: Pending) -> bool:
        """Run ``pending`` on this (the event loop's) thread with a free handler of this
        process, timed, if the calls have been cheap or it is a probe's turn; False if not."""
        self.served += 1
        bound = LOOP_FACTOR * invoker.INLINE_NS  # (0: every call on the threads)
        if bound == 0 or self.loop_off:
            return False
        if self.mean_ns >= bound:  # slow so far: on the loop only for a probe
            if self.served % PROBE_EVERY == 0:
                self.probe_due = self.thread_mean_ns < PROBE_CEILING * bound
            if not self.probe_due:
                return False
        for handler in self.handlers:
            lock = self.busy.get(handler)
            if handler.runs_here and lock is not None and lock.acquire(blocking=False):
                start = perf_counter_ns()
                loop = asyncio.events._get_running_loop()
                asyncio.events._set_running_loop(None)  # a handler may run a loop of its own
                try:
                    final = self._call(handler, [pending], _settle)
                finally:
                    asyncio.events._set_running_loop(loop)
                    lock.release()
                _settle([pending], final, True)
                elapsed = perf_counter_ns() - start
                self.mean_ns = invoker.running_mean(self.mean_ns, elapsed)
                self.loop_off = elapsed >= PROBE_CEILING * bound
                self.probe_due = False
                return True
        return False

    def _work(self, handler: Predictor) -> None:
        lock = self.busy[handler]
        while (batch := self._collect()) is not None:
            start = perf_counter_ns()
            self._run(handler, batch, lock)
            elapsed = perf_counter_ns() - start
            self.thread_mean_ns = invoker.running_mean(self.thread_mean_ns, elapsed)
        handler.close()
        self.busy.pop(handler, None)

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

    def _run(self, handler: Predictor, batch: list[Pending], lock: threading.Lock) -> None:
        """On a worker thread: the answers are settled on the event loop, the last once the
        handler is free again (a request it wakes may find it so)."""
        assert self.loop is not None
        loop = self.loop

        def deliver(batch: list[Pending], frame: frames.Frame, last: bool) -> None:
            loop.call_soon_threadsafe(_settle, batch, frame, last)

        with lock:
            final = self._call(handler, batch, deliver)
        deliver(batch, final, True)

    def _call(self, handler: Predictor, batch: list[Pending], deliver: Deliver) -> frames.Frame:
        """The handler on ``batch``, each frame it sends delivered; its last, returned."""
        socket = service.FrameSocket(lambda frame: deliver(batch, frame, False))
        try:
            return handler.predict([p.request for p in batch], socket)
        except Exception:  # a frame the handler broke: every request fails as one would
            return frames.Frame(503, "Prediction failed", [])


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
            if pending.ended:
                return
            pending.stream = asyncio.Queue()
        event = await pending.stream.get()
        if not isinstance(event, frames.Reply):
            return
        if event.body:
            yield event.body
