"""Sequence batching (model.yaml ``sequence_batching``, Triton's sequence batcher): a stateful
model's requests carry ``sequence_id``, ``sequence_start`` and ``sequence_end``, and the server
keeps each sequence's implicit state between its requests.

``SequenceBatcher`` wraps a model's ``Invoker`` like ``DynamicBatcher`` does. The version has one
lane per instance; a sequence gets a slot of one lane at its START and keeps it (its requests
run on that lane, one at a time, in arrival order) until its END or until it has been idle for
``max_sequence_idle_microseconds``; a START finding every slot taken waits for one. A lane runs
one batch at a time: the next request of each of its sequences that has one, together.

``direct``: a lane has ``max_batch_size`` slots and a sequence's row in the batch is its slot
(rows between hold zeros and READY false). ``oldest``: a lane has ``max_candidate_sequences``
slots; a batch is the oldest waiting requests of up to ``max_batch_size`` of them, run at once
when full or a ``preferred_batch_size``, else after ``max_queue_delay_microseconds``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from time import perf_counter_ns
from typing import Any

import numpy as np

from rosettaserve.core import streaming
from rosettaserve.core.call import Call
from rosettaserve.core.errors import Cancelled, InvalidInput, ModelError, ServingError
from rosettaserve.core.invoker import Invoker
from rosettaserve.core.model import Arrays
from rosettaserve.core.registry import ModelVersion, SequenceBatching
from rosettaserve.core.stats import ModelStats
from rosettaserve.scheduling.batcher import _batch_call, _mark, _resolve, _settle
from rosettaserve.scheduling.batcher import _rows_and_kind as rows_and_kind
from rosettaserve.scheduling.sequence_rows import (
    Row,
    SequenceId,
    batch_arrays,
    check_corrid,
    initial_shape,
    initial_state,
    next_states,
    split_result,
)

log = logging.getLogger("rosettaserve.sequences")
SEQUENCE_KEYS = ("sequence_id", "sequence_start", "sequence_end")


@dataclass(eq=False, slots=True)
class Waiting:
    """One request of a sequence, waiting for its turn."""

    inputs: Arrays
    parameters: dict[str, Any]
    call: Call | None
    start: bool
    end: bool
    future: asyncio.Future[Any]
    enqueued: float


@dataclass(eq=False, slots=True)
class Sequence:
    corrid: SequenceId
    queue: deque[Waiting] = field(default_factory=deque)
    states: dict[str, np.ndarray] = field(default_factory=dict)
    lane: Lane | None = None
    slot: int = -1
    busy: bool = False  # a request of it is running
    ended: bool = False  # its END request has arrived: only a START may follow
    last: float = 0.0  # event loop time of its last request's arrival or answer


@dataclass(eq=False, slots=True)
class Lane:
    """One instance's batch slots and the task that runs their requests."""

    index: int  # its instance: a process-isolated version runs its batches in that worker
    slots: list[Sequence | None]
    task: asyncio.Task[None] | None = None
    arrived: asyncio.Future[None] | None = None


class SequenceBatcher:
    streams = False

    def __init__(
        self,
        inner: Invoker,
        name: str,
        max_batch_size: int,
        settings: SequenceBatching,
        *,
        lanes: int,
        hidden: frozenset[str],
        stats: ModelStats | None = None,
    ) -> None:
        if inner.streams:
            raise ValueError("a model whose predict streams cannot take sequence_batching")
        self.inner, self.name, self.settings, self.stats = inner, name, settings, stats
        self.batched = max_batch_size > 0
        self.max_rows = max(1, max_batch_size)
        self.direct = settings.strategy == "direct"
        slots = self.max_rows if self.direct else max(1, settings.max_candidate_sequences)
        self.lanes = [Lane(i, [None] * slots) for i in range(max(1, lanes))]
        self.hidden = hidden  # state outputs the clients do not get
        self.sequences: dict[SequenceId, Sequence] = {}
        self.backlog: deque[Sequence] = deque()  # started, waiting for a free slot
        self._reaper: asyncio.Task[None] | None = None

    @property
    def waiting(self) -> int:
        return sum(len(seq.queue) for seq in self.sequences.values())

    @property
    def takes_parameters(self) -> bool:
        return self.inner.takes_parameters

    def stream(
        self, inputs: Arrays, parameters: dict[str, Any], call: Call | None = None
    ) -> AsyncIterator[Any]:
        """gRPC's stream (ModelStreamInfer): each request's one answer, as ``predict`` gives."""
        return streaming.one(self.predict, inputs, parameters, call)

    async def predict(
        self, inputs: Arrays, parameters: dict[str, Any], call: Call | None = None
    ) -> Any:
        corrid, start, end = self._request_of(inputs, parameters)
        loop = asyncio.get_running_loop()
        seq = self.sequences.get(corrid)
        if seq is None or (seq.ended and not start):
            if not start:
                raise InvalidInput(
                    f"inference request for sequence {corrid} to model '{self.name}' must "
                    "specify the START flag on the first request of the sequence"
                )
            seq = self.sequences[corrid] = Sequence(corrid)
            self._place(seq)
        seq.ended = end
        item = Waiting(inputs, parameters, call, start, end, loop.create_future(), loop.time())
        seq.queue.append(item)
        seq.last = item.enqueued
        if seq.lane is not None:
            self._wake(seq.lane, loop)
        if self._reaper is None:
            self._reaper = loop.create_task(self._reap())
        try:
            return await item.future
        except asyncio.CancelledError:  # timed out or abandoned: it does not run
            with contextlib.suppress(ValueError):
                seq.queue.remove(item)
            raise

    def _request_of(
        self, inputs: Arrays, parameters: dict[str, Any]
    ) -> tuple[SequenceId, bool, bool]:
        corrid = parameters.get("sequence_id")
        if isinstance(corrid, bool) or not isinstance(corrid, int | str) or not corrid:
            raise InvalidInput(
                f"inference request to model '{self.name}' must specify a non-zero or non-empty "
                "correlation ID"
            )
        if self.batched and any(arr.ndim and arr.shape[0] != 1 for arr in inputs.values()):
            raise InvalidInput(
                f"inference request to model '{self.name}' must specify batch-size 1 due to "
                "requirements of sequence batcher"
            )
        check_corrid(self.settings, corrid, self.name)
        return corrid, bool(parameters.get("sequence_start")), bool(parameters.get("sequence_end"))

    # -- slots ---------------------------------------------------------------------------------

    def _place(self, seq: Sequence) -> bool:
        """A free slot for ``seq`` in the lane with the most free (else it waits in the
        backlog); whether it got one."""
        lane = max(self.lanes, key=lambda lane: lane.slots.count(None))
        if None not in lane.slots:
            self.backlog.append(seq)
            return False
        seq.lane, seq.slot = lane, lane.slots.index(None)
        lane.slots[seq.slot] = seq
        return True

    def _release(self, seq: Sequence) -> None:
        """``seq`` leaves (ended or idle): its slot goes to the oldest sequence waiting."""
        if self.sequences.get(seq.corrid) is seq:
            del self.sequences[seq.corrid]
        lane = seq.lane
        if lane is None:
            with contextlib.suppress(ValueError):
                self.backlog.remove(seq)
            return
        lane.slots[seq.slot] = None
        seq.lane = None
        loop = asyncio.get_running_loop()
        while self.backlog and None in lane.slots:
            waiting = self.backlog.popleft()
            self._place(waiting)
            if waiting.lane is not None:
                self._wake(waiting.lane, loop)

    async def _reap(self) -> None:
        """Release the sequences idle for ``max_sequence_idle_microseconds``, as long as
        there are sequences."""
        idle = self.settings.idle_us / 1e6
        loop = asyncio.get_running_loop()
        try:
            while self.sequences:
                now = loop.time()
                soonest = idle
                for seq in list(self.sequences.values()):
                    if seq.busy or seq.queue:
                        continue
                    if now - seq.last >= idle:
                        log.info("model %s: sequence %s idle, released", self.name, seq.corrid)
                        self._release(seq)
                    else:
                        soonest = min(soonest, seq.last + idle - now)
                await asyncio.sleep(soonest)
        finally:
            self._reaper = None

    # -- running -------------------------------------------------------------------------------

    def _wake(self, lane: Lane, loop: asyncio.AbstractEventLoop) -> None:
        if lane.task is None:
            lane.task = loop.create_task(self._drain(lane))
        elif lane.arrived is not None and not lane.arrived.done():
            lane.arrived.set_result(None)

    async def _drain(self, lane: Lane) -> None:
        try:
            while True:
                chosen = await self._next_batch(lane)
                if not chosen:
                    return
                await self._execute(lane, chosen)
        finally:
            lane.task = None

    async def _next_batch(self, lane: Lane) -> list[Sequence | None]:
        """The batch's rows: for ``direct`` one per slot up to the last with a request (None:
        nothing from that slot), for ``oldest`` the sequences with the oldest requests."""
        loop = asyncio.get_running_loop()
        while True:
            ready = [s for s in lane.slots if s is not None and s.queue and not s.busy]
            if not ready:
                return []
            ready.sort(key=lambda s: s.queue[0].enqueued)
            if self.batched:  # only requests of the oldest one's shapes run together
                kind = self._kind(ready[0])
                ready = [s for s in ready if self._kind(s) == kind]
            if self.direct:
                last = max(s.slot for s in ready)
                return [s if s in ready else None for s in lane.slots[: last + 1]]
            chosen = ready[: self.max_rows]
            delay = self.settings.max_queue_delay_us / 1e6
            due = chosen[0].queue[0].enqueued + delay
            if len(chosen) >= self.max_rows or loop.time() >= due:
                return list(chosen)
            preferred = [p for p in self.settings.preferred_batch_size if p <= len(chosen)]
            if preferred:  # the largest preferred size the waiting requests fill
                return list(chosen[: max(preferred)])
            arrived: asyncio.Future[None] = loop.create_future()
            lane.arrived = arrived
            timer = loop.call_at(due, _resolve, arrived)
            try:
                await arrived
            finally:
                timer.cancel()
                lane.arrived = None

    def _kind(self, seq: Sequence) -> tuple[Any, ...]:
        """What the next request of ``seq`` may be batched with: its inputs' names, datatypes
        and dimensions after the first, and its states' shapes (a state's -1 dims may differ
        between sequences)."""
        item = seq.queue[0]
        if item.start or not seq.states:
            states = tuple(initial_shape(s) for s in self.settings.states)
        else:
            states = tuple(seq.states[s.input_name].shape for s in self.settings.states)
        return rows_and_kind(item.inputs)[1], states

    async def _execute(self, lane: Lane, chosen: list[Sequence | None]) -> None:
        taken = [(seq, seq.queue.popleft()) if seq is not None else None for seq in chosen]
        rows: list[Row | None] = []
        for pair in taken:
            if pair is None:
                rows.append(None)
                continue
            seq, item = pair
            seq.busy = True
            if item.start or not seq.states:
                seq.states = {s.input_name: initial_state(s) for s in self.settings.states}
            rows.append(Row(item.inputs, seq.corrid, item.start, item.end, seq.states))
        items = [pair[1] for pair in taken if pair is not None]
        start = perf_counter_ns()
        try:
            arrays = batch_arrays(self.settings, rows, self.batched)
            ran = perf_counter_ns()
            for item in items:
                _mark(item.call, ran, len(items))
            parameters = {k: v for k, v in items[0].parameters.items() if k not in SEQUENCE_KEYS}
            batch_call = _batch_call([item.call for item in items])
            batch_call.instance = lane.index
            result = await self.inner.predict(arrays, parameters, batch_call)
            done = perf_counter_ns()
            parts = split_result(result, self.name, rows, self.batched)
        except BaseException as exc:
            self._failed(taken, exc)
            if isinstance(exc, asyncio.CancelledError):
                raise
            return
        self._answer(taken, parts, done)
        if self.stats is not None:
            self.stats.record_execution(
                len(items), ran - start, done - ran, perf_counter_ns() - done
            )

    def _answer(
        self,
        taken: list[tuple[Sequence, Waiting] | None],
        parts: list[dict[str, np.ndarray] | None],
        done: int,
    ) -> None:
        now = asyncio.get_running_loop().time()
        for pair, part in zip(taken, parts, strict=True):
            if pair is None or part is None:
                continue
            seq, item = pair
            seq.states = {**seq.states, **next_states(self.settings.states, part, self.batched)}
            self._finish(seq, item, now)
            if item.call is not None:
                item.call.done = done
            shown = {k: v for k, v in part.items() if k not in self.hidden}
            _settle(item.future, result=shown)

    def _failed(self, taken: list[tuple[Sequence, Waiting] | None], exc: BaseException) -> None:
        if isinstance(exc, asyncio.CancelledError):
            error: BaseException = Cancelled("the server stopped while the batch ran")
        elif isinstance(exc, ServingError):
            error = exc
        else:
            log.error("sequence batching for model %s failed", self.name, exc_info=exc)
            error = ModelError(f"sequence batching for model '{self.name}' failed: {exc}")
        now = asyncio.get_running_loop().time()
        for pair in taken:
            if pair is not None:
                self._finish(pair[0], pair[1], now)
                _settle(pair[1].future, error=error)

    def _finish(self, seq: Sequence, item: Waiting, now: float) -> None:
        seq.busy = False
        seq.last = now
        if item.end and not seq.queue:
            self._release(seq)
        elif seq.lane is not None and seq.queue:
            self._wake(seq.lane, asyncio.get_running_loop())


def schedule_sequences(
    mv: ModelVersion, invoker: Invoker, settings: SequenceBatching, lanes: int
) -> SequenceBatcher:
    """The sequence batcher the data plane calls for ``mv``; the state outputs that are not
    declared under ``outputs`` stay the server's (Triton returns only those declared)."""
    declared = {spec.name for spec in mv.outputs}
    hidden = frozenset(s.output_name for s in settings.states if s.output_name not in declared)
    mv.sequence_batching = settings
    return SequenceBatcher(
        invoker, mv.name, mv.max_batch_size, settings, lanes=lanes, hidden=hidden, stats=mv.stats
    )
