"""Running a handler at once: the contract between the servers that drive request handlers and
the code those handlers run.

Most calls to a fast model never wait, and a task made and woken for each of them would cost
more than the call. So a server (a ``Driver``: transport/eager.py's, which the HTTP/1.1 and
gRPC servers use) runs a request's handler at once, outside any task, up to its first wait:
  - a handler that never waits has finished in that step: no task was made for it;
  - an exception of that step comes out of it, to the server;
  - a handler that waits is adopted by a task (``adopt``), which resumes it where it stopped;
    a task cancelled before its first step still reaches the handler (its ``with`` and
    ``finally`` blocks run, as they would had a task driven it all along);
  - a handler that waits for a ``Resumable`` (a batch's result: scheduling/batcher.py) may be
    driven on from that future's done callback, without a task (the HTTP/1.1 server does);
  - however it is driven, a future it waits for that is cancelled throws CancelledError into it
    at that wait, as a task does.

What a handler may do in return: anything but ask for the current task, which it may not have.
An asyncio timeout does ask (it cancels the task): a wait held to a deadline is ``bounded``,
which cancels the wait it is in, so it works whichever way the handler is driven.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Awaitable, Coroutine, Generator
from typing import Any, Final, Generic, Protocol, TypeVar

T = TypeVar("T")

FINISHED: Final = object()  # what a first step gives for a handler that ended in it


class Driver(Protocol):
    """How a server runs handlers at once (see the module's contract)."""

    def first_step(self, handler: Coroutine[Any, Any, Any], context: contextvars.Context) -> Any:
        """Run ``handler`` outside any task, in ``context``, up to its first wait: FINISHED
        when it ended there, else what it waits for (an exception of the step comes out)."""
        ...

    def adopt(
        self, handler: Coroutine[Any, Any, T], waits_for: Any, context: contextvars.Context
    ) -> asyncio.Task[T]:
        """A task, in ``context``, that drives on a handler stopped at ``waits_for``."""
        ...


class Resumable(asyncio.Future[Any]):
    """A future whose waiter may be resumed from the future's own callback instead of by a task.

    A batched request waits for its batch's result. A driver that ran the request's handler up
    to that wait may drive the handler on from this future's done callback: the handler's rest
    (the answer's encoding, its write) then runs as a task's step would, without a task made
    for it and woken. Only the server's own code runs between such a wait and the answer,
    which is why a model's own futures are never driven this way. It stays a plain asyncio
    future to every other waiter (a task awaits it as any other).

    Not compiled (scripts/compile_native.py): mypyc cannot compile a subclass of asyncio's C
    future."""

    __slots__ = ()


class Bounded(Generic[T]):
    """``await bounded(awaitable, deadline)``: the awaitable's result, or TimeoutError once the
    loop's clock passes ``deadline``: the wait it is in is then cancelled, and the awaitable
    unwinds as it would on any cancel (a queued request leaves its queue). No task is needed:
    whatever drives the handler, a task or a server's callback, delivers that cancel. A cancel
    of the handler's own task that lands with the deadline stays a cancel."""

    __slots__ = ("awaitable", "deadline", "expired", "owed", "step")

    def __init__(self, awaitable: Awaitable[T], deadline: float) -> None:
        self.awaitable = awaitable
        self.deadline = deadline  # event loop time
        self.step: Any = None  # what the awaitable waits for now
        self.expired = False
        self.owed = False  # the deadline passed while nothing cancellable was waited for

    def _expire(self) -> None:
        self.expired = True
        step = self.step
        if not (asyncio.isfuture(step) and step.cancel()):
            self.owed = True  # thrown in at its next step

    def __await__(self) -> Generator[Any, Any, T]:
        steps = self.awaitable.__await__()
        timer = asyncio.get_running_loop().call_at(self.deadline, self._expire)
        sent: Any = None
        thrown: BaseException | None = None
        try:
            while True:
                try:
                    step = steps.send(sent) if thrown is None else steps.throw(thrown)
                except StopIteration as finished:
                    return finished.value  # type: ignore[no-any-return]
                except asyncio.CancelledError:
                    if self.expired and not _task_cancelled():
                        raise TimeoutError from None
                    raise
                self.step, sent, thrown = step, None, None
                try:
                    sent = yield step
                except GeneratorExit:
                    steps.close()
                    raise
                except BaseException as exc:  # cancellation too: it goes through
                    thrown = exc
                if self.owed and thrown is None:
                    self.owed, thrown = False, asyncio.CancelledError()
        finally:
            timer.cancel()


def bounded(awaitable: Awaitable[T], deadline: float) -> Bounded[T]:
    """``awaitable`` held to ``deadline`` (event loop time): see ``Bounded``."""
    return Bounded(awaitable, deadline)


def _task_cancelled() -> bool:
    """Whether the task driving the handler, if a task drives it, was asked to cancel."""
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0
