"""Run a handler at once, up to its first wait, and hand what is left of it to a task: the
servers' ``Driver`` of core/run_at_once.py (the contract is stated there).

Most calls to a fast model never wait: answered in the read callback, they cost no task. One
that does wait is ``Adopted`` by a task, which resumes it where it stopped.

A task may be cancelled before its first step (a client that resets its call in the same read
as the request). A coroutine wrapping ``await adopted`` would then never run, and the handler
would stay suspended where it first waited, its ``with`` and ``finally`` blocks never run, until
the garbage collector finds it. So a task drives the ``Adopted`` itself (it is a coroutine as
asyncio sees one: ``send``, ``throw``, ``close``), and a cancellation before the first step
reaches the handler, as it would have had it been awaited all along.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
from collections.abc import Coroutine, Generator
from typing import Any, Final, Generic, TypeVar, cast

from rosettaserve.core import run_at_once

T = TypeVar("T")
# Final: compiled, a C static (core/run_at_once.py is not compiled: a lookup there each time)
FINISHED: Final = run_at_once.FINISHED


class Adopted(Generic[T]):
    """A coroutine that has already run up to its first wait, made awaitable again: the task
    that awaits it, or drives it (``task``), receives that wait first, then drives the
    coroutine on (sends, throws and closes go through to it, as ``await`` would)."""

    def __init__(self, coroutine: Coroutine[Any, Any, T], waits_for: Any) -> None:
        self.coroutine, self.waits_for = coroutine, waits_for
        self.started = False  # the first wait was handed to the task that drives it

    def task(self, context: Any) -> asyncio.Task[T]:
        """A task that drives the handler on from its first wait (``context``: the one it ran
        its first step in)."""
        loop = asyncio.get_running_loop()
        return loop.create_task(cast(Coroutine[Any, Any, T], self), context=context)

    # -- the coroutine protocol, for the task that drives it ------------------------------------

    def send(self, value: Any) -> Any:
        if not self.started:
            self.started = True
            return self.waits_for
        return self.coroutine.send(value)

    def throw(self, exc: BaseException) -> Any:
        if not self.started:  # cancelled before its first step: what it waits for is dropped
            self.started = True
            if isinstance(exc, asyncio.CancelledError) and asyncio.isfuture(self.waits_for):
                self.waits_for.cancel()
        return self.coroutine.throw(exc)

    def close(self) -> None:
        self.coroutine.close()

    def abandon(self) -> None:
        """Nothing will drive it on (the task that was to await it was cancelled before its
        first step): what it waits for is cancelled and the handler unwinds, its ``with`` and
        ``finally`` blocks run, as a cancellation would have made them."""
        if self.started:
            return
        # it ends (as it should) or waits again: then ``close`` ends it
        with contextlib.suppress(Exception, asyncio.CancelledError):
            self.throw(asyncio.CancelledError())
        self.coroutine.close()

    def __await__(self) -> Generator[Any, Any, T]:
        coroutine, step = self.coroutine, self.waits_for
        while True:
            try:
                sent = yield step
            except GeneratorExit:
                coroutine.close()
                raise
            except BaseException as exc:  # cancellation too: it goes through
                try:
                    step = coroutine.throw(exc)
                except StopIteration as finished:
                    return finished.value  # type: ignore[no-any-return]
            else:
                try:
                    step = coroutine.send(sent)
                except StopIteration as finished:
                    return finished.value  # type: ignore[no-any-return]


Coroutine.register(Adopted)  # what asyncio checks before it makes a task of it


class EagerDriver:
    """core/run_at_once.py's ``Driver``: the first step in the caller's stack, then ``Adopted``."""

    def first_step(self, handler: Coroutine[Any, Any, Any], context: contextvars.Context) -> Any:
        # next() with a default: a coroutine that ends in its first step (a fast model's unary
        # call) does not raise its StopIteration into this compiled function, whose catching of
        # it (traceback entry, exception state saved and restored) [cost: stop-iteration]
        return context.run(next, handler.__await__(), FINISHED)

    def adopt(
        self, handler: Coroutine[Any, Any, T], waits_for: Any, context: contextvars.Context
    ) -> asyncio.Task[T]:
        return Adopted(handler, waits_for).task(context)


EAGER = EagerDriver()
