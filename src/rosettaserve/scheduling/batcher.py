"""Dynamic batching: requests to one model version queue up and run as one batch.

``DynamicBatcher`` wraps a model's ``Invoker`` and offers the same interface, so every protocol's
requests meet in the same queue. A batch is the oldest waiting request plus the later ones that
fit with it, concatenated along the first (batch) dimension, up to ``max_batch_size`` rows; the
model runs once and each request gets its own rows of every output back.

Requests fit together when their inputs have the same names, datatypes and non-batch dimensions
(and, for a model whose ``predict`` takes ``parameters``, equal parameters). Others are never
mixed: they wait for a later batch of their own kind, in the queue's order.

The queue is served in priority order, then fairly between API keys by their weights
(core/share.py, fair_share.py); without either, first come first served.

When a batch runs (Triton's rules): at once if it is full (``max_batch_size`` rows) or the oldest
request has waited ``max_queue_delay_microseconds``; else at once with the largest
``preferred_batch_size`` a run of the queue adds up to; else it waits for more requests, until
that delay. One batch runs at a time; the next one gathers while it runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
from collections import deque
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from time import perf_counter_ns as _perf_counter_ns
from typing import Any, Final

import numpy as np

from rosettaserve.core import streaming
from rosettaserve.core.call import Call
from rosettaserve.core.errors import Cancelled, InvalidInput, ModelError, ServingError
from rosettaserve.core.invoker import Invocable, Invoker
from rosettaserve.core.model import Arrays
from rosettaserve.core.registry import DynamicBatching, ModelVersion
from rosettaserve.core.run_at_once import Resumable
from rosettaserve.core.stats import ModelStats
from rosettaserve.scheduling.fair_share import Clock, enqueue

log = logging.getLogger("rosettaserve.batching")
Kind = tuple[tuple[str, np.dtype, tuple[int, ...]], ...]
# Final: compiled, a C static, not a lookup in the module's dict [cost: final-static]
perf_counter_ns: Final = _perf_counter_ns


@dataclass(init=False, eq=False, slots=True)
class Pending:
    inputs: Arrays
    parameters: dict[str, Any]
    rows: int
    kind: Kind
    call: Call | None
    future: asyncio.Future[Any]
    enqueued: float  # event loop time
    priority: int  # lower: served earlier (core/share.py)
    tag: float  # its start tag in fair queueing (fair_share.py)

    def __init__(  # (its own, not the dataclass's: why in scripts/compile_native.py)
        self,
        inputs: Arrays,
        parameters: dict[str, Any],
        call: Call | None,
        *,
        future: asyncio.Future[Any],
        enqueued: float,
    ) -> None:
        self.inputs = inputs
        self.parameters = parameters
        self.rows, self.kind = _rows_and_kind(inputs)
        self.call = call
        self.future = future
        self.enqueued = enqueued
        self.priority = 0
        self.tag = 0.0


class DynamicBatcher:
    def __init__(
        self,
        inner: Invoker,
        name: str,
        max_batch_size: int,
        policy: DynamicBatching,
        stats: ModelStats | None = None,
    ) -> None:
        if inner.streams:
            raise ValueError("a streaming model cannot be batched")
        self.inner = inner
        self.name = name
        self.max_batch_size = max_batch_size
        self.preferred = frozenset(policy.preferred_batch_size)
        self.delay = policy.max_queue_delay_microseconds / 1e6
        self.stats = stats
        self._queue: deque[Pending] = deque()
        self._clock = Clock()
        self._task: asyncio.Task[None] | None = None
        self._arrived: asyncio.Future[None] | None = None

    streams = False

    @property
    def waiting(self) -> int:
        return len(self._queue)

    async def predict(
        self, inputs: Arrays, parameters: dict[str, Any], call: Call | None = None
    ) -> Any:
        if not inputs:
            return await self.inner.predict(inputs, parameters, call)
        loop = asyncio.get_running_loop()
        # (a future the HTTP/1.1 server may resume the request's handler from: core/run_at_once.py)
        future = Resumable()  # (of the running loop; loop=loop, a keyword, cost ~790 more)
        item = Pending(inputs, parameters, call, future=future, enqueued=loop.time())
        enqueue(self._queue, self._clock, item, item.rows)  # in its order (fair_share.py)
        self._wake(loop)
        try:
            return await item.future
        except asyncio.CancelledError:  # timed out or abandoned: drop the work
            self._withdraw(item)
            raise

    def stream(
        self, inputs: Arrays, parameters: dict[str, Any], call: Call | None = None
    ) -> AsyncIterator[Any]:
        """A streaming rpc on a batched model: its one answer, from a batch like any other."""
        return streaming.one(self.predict, inputs, parameters, call)

    # -- the queue -----------------------------------------------------------------------------

    def _wake(self, loop: asyncio.AbstractEventLoop) -> None:
        if self._task is None:
            self._task = loop.create_task(self._drain())
        elif self._arrived is not None and not self._arrived.done():
            self._arrived.set_result(None)

    def _withdraw(self, item: Pending) -> None:
        with contextlib.suppress(ValueError):  # in a running batch: its result is discarded
            self._queue.remove(item)

    async def _drain(self) -> None:
        """Form and run batches until the queue is empty (then a new request starts it again)."""
        try:
            while self._queue:
                batch = await self._next_batch()
                if batch:
                    await self._execute(batch)
        finally:
            self._task = None
            self._clock.idle()

    async def _next_batch(self) -> list[Pending]:
        loop = asyncio.get_running_loop()
        while True:
            self._expire(loop.time())
            if not self._queue:
                return []
            batch, rows, preferred = self._select()
            if rows >= self.max_batch_size or loop.time() - batch[0].enqueued >= self.delay:
                return self._take(batch)
            if preferred:
                return self._take(batch[:preferred])
            await self._wait_for_more(loop, batch[0].enqueued + self.delay)

    def _select(self) -> tuple[list[Pending], int, int]:
        """The oldest request and the later ones of its kind that fit; and how many of them
        (a prefix) add up to the largest preferred batch size (0: none does)."""
        head = self._queue[0]
        batch, rows = [head], head.rows
        preferred = 1 if rows in self.preferred else 0
        check_parameters = self.inner.takes_parameters
        for item in itertools.islice(self._queue, 1, None):
            if rows >= self.max_batch_size:
                break
            if item.kind != head.kind or rows + item.rows > self.max_batch_size:
                continue
            if check_parameters and item.parameters != head.parameters:
                continue
            batch.append(item)
            rows += item.rows
            if rows in self.preferred:
                preferred = len(batch)
        return batch, rows, preferred

    def _take(self, batch: list[Pending]) -> list[Pending]:
        for item in batch:
            self._clock.served(item.tag)
        queue = self._queue
        if all(queued is item for queued, item in zip(queue, batch, strict=False)):
            for _ in batch:
                queue.popleft()
        else:
            taken = {id(item) for item in batch}
            self._queue = deque(item for item in queue if id(item) not in taken)
        return batch

    def _expire(self, now: float) -> None:
        """Requests whose deadline passed while queued leave without running."""
        if not any(i.call and i.call.deadline and i.call.deadline <= now for i in self._queue):
            return
        kept: deque[Pending] = deque()
        for item in self._queue:
            deadline = item.call.deadline if item.call else None
            if deadline is not None and deadline <= now:
                _settle(item.future, error=TimeoutError())  # the data plane words the 504
            else:
                kept.append(item)
        self._queue = kept

    async def _wait_for_more(self, loop: asyncio.AbstractEventLoop, until: float) -> None:
        arrived: asyncio.Future[None] = loop.create_future()
        self._arrived = arrived
        timer = loop.call_at(until, _resolve, arrived)
        try:
            await arrived
        finally:
            timer.cancel()
            self._arrived = None

    # -- running a batch -----------------------------------------------------------------------

    async def _execute(self, batch: list[Pending]) -> None:
        start = perf_counter_ns()
        rows = sum(item.rows for item in batch)
        try:
            inputs = batch[0].inputs if len(batch) == 1 else _concat(batch, rows)
            ran = perf_counter_ns()
            for item in batch:
                _mark(item.call, ran, rows)
            call = _batch_call([item.call for item in batch])
            result = await self.inner.predict(inputs, batch[0].parameters, call)
            done = perf_counter_ns()
            parts = [result] if len(batch) == 1 else self._split(result, batch, rows)
        except ServingError as exc:
            for item in batch:
                _settle(item.future, error=exc)
            return
        except asyncio.CancelledError:
            for item in batch:
                _settle(item.future, error=Cancelled("the server stopped while the batch ran"))
            raise
        except Exception as exc:  # concatenation or splitting failed: the server's fault
            log.error("batching for model %s failed", self.name, exc_info=exc)
            error = ModelError(f"batching for model '{self.name}' failed: {exc}")
            for item in batch:
                _settle(item.future, error=error)
            return
        for item, part in zip(batch, parts, strict=True):
            if item.call is not None:
                item.call.done = done
            _settle(item.future, result=part)
        if self.stats is not None:
            self.stats.record_execution(rows, ran - start, done - ran, perf_counter_ns() - done)

    def _split(self, result: Any, batch: list[Pending], rows: int) -> list[dict[str, Any]]:
        """Each request's rows of every output."""
        if not isinstance(result, Mapping):
            raise ModelError(
                f"model '{self.name}' returned {type(result).__name__}; predict must return "
                "a dict of output name to array"
            )
        arrays = {name: np.asarray(value) for name, value in result.items()}
        for name, arr in arrays.items():
            if arr.ndim == 0 or arr.shape[0] != rows:
                got = "a scalar" if arr.ndim == 0 else f"{arr.shape[0]} rows"
                raise ModelError(
                    f"model '{self.name}' returned {got} in output '{name}' for a batch of "
                    f"{rows} rows: a batched model must return one row per input row"
                )
        parts, offset = [], 0
        for item in batch:
            end = offset + item.rows
            parts.append({name: arr[offset:end] for name, arr in arrays.items()})
            offset = end
        return parts


def schedule(mv: ModelVersion, invoker: Invoker, policy: DynamicBatching | None) -> Invocable:
    """The invoker the data plane calls for ``mv``: batched when its config asks and it can be."""
    if policy is None or mv.max_batch_size <= 0:
        return invoker
    if invoker.streams:
        log.warning("model %s streams its responses: dynamic batching is off for it", mv.name)
        return invoker
    mv.dynamic_batching = policy
    return DynamicBatcher(invoker, mv.name, mv.max_batch_size, policy, mv.stats)


def _rows_and_kind(inputs: Arrays) -> tuple[int, Kind]:
    """Rows in the batch dimension (shared by every input), and what may be batched with it.

    The kind holds each input's dtype object, not its ``.str`` (which formats a new string per
    call), and one input needs no sorting [cost: batch-kind]."""
    if len(inputs) == 1:
        for name, arr in inputs.items():
            shape = arr.shape  # (a new tuple at each read of it)
            if not shape:
                raise InvalidInput(f"input '{name}' has no batch dimension (it is a scalar)")
            return shape[0], ((name, arr.dtype, shape[1:]),)
    rows = -1
    kind = []
    for name, arr in sorted(inputs.items()):
        if arr.ndim == 0:
            raise InvalidInput(f"input '{name}' has no batch dimension (it is a scalar)")
        if rows not in (-1, arr.shape[0]):
            raise InvalidInput(
                f"the inputs of a batched model share their first (batch) dimension, but input "
                f"'{name}' has {arr.shape[0]} rows and another has {rows}"
            )
        rows = arr.shape[0]
        kind.append((name, arr.dtype, arr.shape[1:]))
    return rows, tuple(kind)


def _concat(batch: list[Pending], rows: int) -> Arrays:
    return {name: _stack([item.inputs[name] for item in batch], rows) for name in batch[0].inputs}


def _stack(arrays: list[np.ndarray], rows: int) -> np.ndarray:
    """``arrays`` (one kind: one dtype, the same dimensions after the first) one after another.

    Their bytes joined, when each is C-contiguous and holds no Python objects: np.concatenate
    sets up a cast for each array [cost: batch-stack]. (A bytearray: the model gets a writable
    array.)"""
    first = arrays[0]
    if not first.dtype.hasobject:  # (an object array's buffer is its pointers: never joined)
        try:
            joined = bytearray().join(arrays)  # type: ignore[arg-type]  # (a buffer: stubs 3.12+)
        except TypeError:  # one is not C-contiguous
            pass
        else:
            return np.frombuffer(joined, first.dtype).reshape((rows, *first.shape[1:]))
    return np.concatenate(arrays)


def _batch_call(calls: list[Call | None]) -> Call:
    """The batch's own call, due when its last request is (the instances watch it by that);
    ``calls``: its requests' (the sequence batcher's too, whose requests are not Pending)."""
    deadline = 0.0
    for call in calls:
        due = None if call is None else call.deadline
        if due is None:  # a request without a timeout: neither has the batch
            return Call(perf_counter_ns())
        deadline = max(deadline, due)
    return Call(perf_counter_ns(), deadline=deadline)


def _mark(call: Call | None, ran: int, rows: int) -> None:
    if call is not None:
        call.ran = ran
        call.batch_size = rows


def _settle(
    future: asyncio.Future[Any], result: Any = None, error: BaseException | None = None
) -> None:
    """Hand a request (its future) its result or error, unless it has stopped waiting."""
    if future.done():
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)
