"""How the server calls a model's ``predict``: inline or on its own threads, and its errors."""

from __future__ import annotations

import inspect
import os
from collections.abc import AsyncIterator, Callable
from time import perf_counter_ns
from typing import Any, Protocol

from rosettaserve.core import streaming
from rosettaserve.core.call import Call
from rosettaserve.core.errors import served_as
from rosettaserve.core.executor import ThreadInstances
from rosettaserve.core.model import Arrays, Model

# A synchronous predict whose calls average under this many microseconds runs on the event loop
# thread: handing it to a thread and back would cost more than the call (0: always a thread).
INLINE_NS = int(os.environ.get("ROSETTASERVE_INLINE_US", "100")) * 1000
_EWMA_WEIGHT = 0.125  # of the newest call in the running mean of call times


class Invocable(Protocol):
    """How the data plane calls a model: an ``Invoker``, or a wrapper around one (a batcher)."""

    @property
    def streams(self) -> bool: ...

    @property
    def waiting(self) -> int | None:
        """Requests queued in front of the model (None: it keeps no queue of its own)."""
        ...

    async def predict(
        self, inputs: Arrays, parameters: dict[str, Any], call: Call | None = None
    ) -> Any: ...

    def stream(
        self, inputs: Arrays, parameters: dict[str, Any], call: Call | None = None
    ) -> AsyncIterator[Any]: ...


class Invoker:
    """Calls a model's ``predict`` the way its signature asks.

    A synchronous ``predict`` runs on the version's own threads (``instances``), unless its calls
    have been fast (a running mean under ``INLINE_NS``): then it runs on the event loop thread,
    where it saves the two thread switches. One slow call raises the mean and sends the next
    ones back to the threads.
    """

    waiting: int | None = None

    def __init__(self, model: Model, instances: ThreadInstances | None = None) -> None:
        fn = model.predict
        self.model = model
        self.fn: Callable[..., Any] = fn
        self.label = f"{model.name} version {model.version}"  # in the log line of a failure
        self.instances = instances or ThreadInstances(model.name or "model", 1)
        self.is_async = inspect.iscoroutinefunction(fn)
        self.is_async_gen = inspect.isasyncgenfunction(fn)
        self.is_gen = inspect.isgeneratorfunction(fn)
        params = inspect.signature(fn).parameters
        self._takes_parameters = "parameters" in params or any(
            p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()
        )
        self.mean_ns = float(2 * INLINE_NS)  # unknown until measured: start on the pool
        # an async predict that watches deadlines itself (isolation: process) gets the call
        self.takes_call = bool(getattr(model, "takes_call", False))

    @property
    def inline(self) -> bool:
        """Whether the next synchronous call runs on the event loop thread."""
        return self.mean_ns < INLINE_NS

    def _measured(self, elapsed_ns: int) -> None:
        if self.model.calls_models:  # it waits for other models: never on the event loop
            self.mean_ns = float(2 * INLINE_NS)
            return
        self.mean_ns = running_mean(self.mean_ns, elapsed_ns)

    @property
    def streams(self) -> bool:
        return self.is_gen or self.is_async_gen

    @property
    def takes_parameters(self) -> bool:
        return self._takes_parameters

    def kwargs(self, parameters: dict[str, Any]) -> dict[str, Any]:
        return {"parameters": parameters} if self._takes_parameters else _NO_KWARGS

    async def predict(
        self, inputs: Arrays, parameters: dict[str, Any], call: Call | None = None
    ) -> Any:
        kwargs = self.kwargs(parameters)
        call = call or Call(0)
        try:  # (not ``with MODEL_ERRORS``: a try costs nothing until something is raised)
            if self.is_async:
                try:
                    if self.takes_call:  # (it sets ``ran`` once an instance is free)
                        return await self.fn(inputs, call=call, **kwargs)
                    call.ran = perf_counter_ns()
                    return await self.fn(inputs, **kwargs)
                finally:
                    call.done = perf_counter_ns()
            try:
                if self.mean_ns < INLINE_NS:  # self.inline, read without a property call
                    return _timed(call, self.fn, inputs, kwargs)
                return await self.instances.predict(call, self.fn, inputs, kwargs)
            finally:
                if call.done:
                    self._measured(call.done - call.ran)
        except Exception as exc:
            error = served_as(exc, self.label)
            if error is None:
                raise
            raise error from exc

    def stream(
        self, inputs: Arrays, parameters: dict[str, Any], call: Call | None = None
    ) -> AsyncIterator[Any]:
        """``call``: unused (the data plane times a stream as a whole)."""
        return streaming.model_items(self, inputs, parameters)


def running_mean(mean_ns: float, elapsed_ns: int) -> float:
    """The running mean of call times after a call that took ``elapsed_ns`` (compared with
    ``INLINE_NS`` by whatever decides where its next call runs)."""
    return mean_ns + _EWMA_WEIGHT * (elapsed_ns - mean_ns)


_NO_KWARGS: dict[str, Any] = {}  # for a predict without ``parameters`` (never written to)


def _timed(call: Call, fn: Callable[..., Any], inputs: Arrays, kwargs: dict[str, Any]) -> Any:
    """A call on the event loop thread, timed as the instances time theirs."""
    call.ran = perf_counter_ns()
    try:
        return fn(inputs, **kwargs)
    finally:
        call.done = perf_counter_ns()
