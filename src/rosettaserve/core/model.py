"""The model base class users subclass, and how the server calls it."""

from __future__ import annotations

import inspect
import os
from collections.abc import AsyncIterator, Callable, Mapping
from pathlib import Path
from time import perf_counter_ns
from typing import Any, Protocol

import numpy as np

from rosettaserve.core.call import Call
from rosettaserve.core.errors import InvalidInput, ModelError, ServingError
from rosettaserve.core.executor import run_blocking
from rosettaserve.core.types import TensorSpec

Arrays = dict[str, np.ndarray]

# A synchronous predict whose calls average under this many microseconds runs on the event loop
# thread: handing it to a thread and back would cost more than the call (0: always a thread).
INLINE_NS = int(os.environ.get("ROSETTASERVE_INLINE_US", "100")) * 1000
_EWMA_WEIGHT = 0.125  # of the newest call in the running mean of call times


class Model:
    """Base class of every model: user classes and the built-in runtimes alike.

    ``predict`` takes a dict of named arrays and returns one; it may be sync or
    ``async``, a generator (sync or async) for streaming models, and may accept a
    ``parameters`` keyword to receive the request's parameters.
    """

    platform = "python"

    def __init__(
        self,
        name: str = "",
        version: str = "1",
        path: str | Path = ".",
        config: Mapping[str, Any] | None = None,
    ) -> None:
        self.name = name
        self.version = version
        self.path = Path(path)
        self.config: dict[str, Any] = dict(config or {})
        self.inputs: list[TensorSpec] = []
        self.outputs: list[TensorSpec] = []
        self.max_batch_size = 0

    def load(self) -> None:
        """Load weights; ``self.path`` is the version folder."""

    def unload(self) -> None:
        """Release what ``load`` took."""

    def predict(self, inputs: Arrays) -> Any:
        raise NotImplementedError(f"{type(self).__name__} does not implement predict()")


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

    A synchronous ``predict`` runs on the model thread pool, unless its calls have been fast
    (a running mean under ``INLINE_NS``): then it runs on the event loop thread, where it saves
    the two thread switches. One slow call raises the mean and sends the next ones back to
    the pool.
    """

    waiting: int | None = None

    def __init__(self, model: Model) -> None:
        fn = model.predict
        self._fn = fn
        self.is_async = inspect.iscoroutinefunction(fn)
        self.is_async_gen = inspect.isasyncgenfunction(fn)
        self.is_gen = inspect.isgeneratorfunction(fn)
        params = inspect.signature(fn).parameters
        self._takes_parameters = "parameters" in params or any(
            p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()
        )
        self.mean_ns = float(2 * INLINE_NS)  # unknown until measured: start on the pool

    @property
    def inline(self) -> bool:
        """Whether the next synchronous call runs on the event loop thread."""
        return self.mean_ns < INLINE_NS

    def _measured(self, elapsed_ns: int) -> None:
        self.mean_ns += _EWMA_WEIGHT * (elapsed_ns - self.mean_ns)

    @property
    def streams(self) -> bool:
        return self.is_gen or self.is_async_gen

    @property
    def takes_parameters(self) -> bool:
        return self._takes_parameters

    def _kwargs(self, parameters: dict[str, Any]) -> dict[str, Any]:
        return {"parameters": parameters} if self._takes_parameters else _NO_KWARGS

    async def predict(
        self, inputs: Arrays, parameters: dict[str, Any], call: Call | None = None
    ) -> Any:
        kwargs = self._kwargs(parameters)
        call = call or Call(0)
        try:  # (not ``with _MODEL_ERRORS``: a try costs nothing until something is raised)
            if self.is_async:
                call.ran = perf_counter_ns()
                try:
                    return await self._fn(inputs, **kwargs)
                finally:
                    call.done = perf_counter_ns()
            try:
                if self.mean_ns < INLINE_NS:  # self.inline, read without a property call
                    return _timed(call, self._fn, inputs, kwargs)
                return await run_blocking(_timed, call, self._fn, inputs, kwargs)
            finally:
                if call.done:
                    self._measured(call.done - call.ran)
        except Exception as exc:
            error = _served_as(exc)
            if error is None:
                raise
            raise error from exc

    async def stream(
        self, inputs: Arrays, parameters: dict[str, Any], call: Call | None = None
    ) -> AsyncIterator[Any]:
        """``call``: unused (the data plane times a stream as a whole)."""
        kwargs = self._kwargs(parameters)
        with _MODEL_ERRORS:
            if self.is_async_gen:
                async for item in self._fn(inputs, **kwargs):
                    yield item
                return
            if not self.is_gen:
                yield await self.predict(inputs, parameters)
                return
            gen = iter(await run_blocking(self._fn, inputs, **kwargs))
            done = object()
            while (item := await run_blocking(next, gen, done)) is not done:
                yield item


_NO_KWARGS: dict[str, Any] = {}  # for a predict without ``parameters`` (never written to)


def _timed(call: Call, fn: Callable[..., Any], inputs: Arrays, kwargs: dict[str, Any]) -> Any:
    """On the model thread pool, ``ran`` - ``submitted`` is the wait for a free thread."""
    call.ran = perf_counter_ns()
    try:
        return fn(inputs, **kwargs)
    finally:
        call.done = perf_counter_ns()


def _served_as(exc: Exception) -> ServingError | None:
    """What a model's exception becomes: a ValueError means bad input (400), anything else is
    the model's fault (None: it is a ServingError already, and goes on as it is)."""
    if isinstance(exc, ServingError):
        return None
    if isinstance(exc, ValueError):
        return InvalidInput(str(exc) or "the model rejected the input")
    return ModelError(f"{type(exc).__name__}: {exc}")


class _ModelErrors:
    """``_served_as`` around a block (a class rather than a generator-based context manager)."""

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: object, exc: BaseException | None, tb: object) -> None:
        if isinstance(exc, Exception):
            error = _served_as(exc)
            if error is not None:
                raise error from exc


_MODEL_ERRORS = _ModelErrors()  # stateless: one for every call
