"""Where blocking work leaves the event loop: each model version's own execution instances.

A model version runs its synchronous calls on threads of its own (``instances:`` in model.yaml,
like Triton's ``instance_group { count }``), so a model whose calls hang holds only its own
threads: other models keep answering. Loading and unloading run on a pool of their own too.

A request's own large work (inflating a compressed body, decoding many BYTES elements,
tokenizing a long prompt, rendering a long chat) runs on the request-work threads
(``run_request_work``), so that one client's large request does not hold the event loop that
answers every other client. Work that finds out only as it goes that it is large (an inflated
size, a tensor's element count) starts on the loop with a budget and raises ``LargeWork`` past
it; its caller then does it again on those threads.

The threads are daemon threads: a call that never returns cannot keep the process from exiting
once the server has drained (``--drain-grace``).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import queue
import threading
import time
from collections.abc import Callable
from time import perf_counter_ns
from typing import Any, Final, Protocol, TypeVar

from rosettaserve.core.call import Call
from rosettaserve.core.errors import keep_origin

T = TypeVar("T")
LOADER_THREADS = 4  # loads and unloads at once (one that hangs leaves the others a thread)
REQUEST_WORK_THREADS = 2  # requests' large work at once (the rest waits for a thread)
# A request body parsed by a parser whose cost per byte has no small bound (Python work per
# element: TF Serving's and grps' JSON) is parsed on the request-work threads past this size.
INLINE_BODY_BYTES = 64 * 1024

# loop, future, context, call (None: not a predict), function, positional and keyword arguments
_Work = tuple[
    asyncio.AbstractEventLoop,
    asyncio.Future[Any],
    contextvars.Context,
    Call | None,
    Callable[..., Any],
    tuple[Any, ...],
    dict[str, Any],
]


class LargeWork(Exception):
    """Raised by work done on the event loop with a budget, once it finds it needs more: the
    caller does the work again with ``run_request_work`` (never seen by a client)."""


class ExecutionPool(Protocol):
    """A model version's execution instances, as the server's health check sees them."""

    @property
    def count(self) -> int: ...

    def overdue(self, now: float) -> list[Call]:
        """Calls still running past their deadline (event loop time ``now``): their requests
        were answered with a timeout, but they hold an instance. (Instances that can stop such
        a call -- worker processes -- stop it here, and list none.)"""
        ...

    def close(self) -> None:
        """Stop taking work (calls running go on until they return)."""
        ...


class ThreadInstances:
    """``count`` threads, started as work arrives, that run one version's blocking calls."""

    def __init__(self, label: str, count: int) -> None:
        self.label = label
        self._count = count
        self._queue: queue.SimpleQueue[_Work | None] = queue.SimpleQueue()
        self._idle = threading.Semaphore(0)
        self._threads: list[threading.Thread] = []
        self.running: dict[int, Call] = {}  # id(call) -> a predict call in a thread now
        self._closed = False

    @property
    def count(self) -> int:
        return self._count

    def run(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> asyncio.Future[T]:
        """Run ``fn(*args, **kwargs)`` on one of the threads; await the result."""
        return self._submit(None, fn, args, kwargs)

    def predict(
        self, call: Call, fn: Callable[..., Any], inputs: Any, kwargs: dict[str, Any]
    ) -> asyncio.Future[Any]:
        """A model's predict: ``call.ran`` and ``call.done`` say when it ran (``ran`` -
        ``submitted`` is the wait for a free instance), and it is watched while it runs."""
        return self._submit(call, fn, (inputs,), kwargs)

    def _submit(
        self, call: Call | None, fn: Callable[..., Any], args: tuple[Any, ...], kw: dict[str, Any]
    ) -> asyncio.Future[Any]:
        if self._closed:
            raise RuntimeError(f"the execution instances of {self.label} are closed")
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        self._queue.put((loop, future, contextvars.copy_context(), call, fn, args, kw))
        if not self._idle.acquire(blocking=False) and len(self._threads) < self._count:
            name = f"model-{self.label}-{len(self._threads)}"
            thread = threading.Thread(target=self._work, name=name, daemon=True)
            self._threads.append(thread)
            thread.start()
        return future

    def overdue(self, now: float) -> list[Call]:
        calls = list(self.running.values())  # (a copy: the threads change it as they go)
        return [c for c in calls if c.deadline is not None and c.deadline < now]

    def close(self) -> None:
        self._closed = True
        for _ in self._threads:
            self._queue.put(None)

    def _work(self) -> None:
        while (work := self._queue.get()) is not None:
            self._run(work)
            del work  # (nothing of a request is kept alive while the thread waits for more)
            self._idle.release()

    def _run(self, work: _Work) -> None:
        loop, future, ctx, call, fn, args, kwargs = work
        if future.cancelled():  # a call that expired while queued never runs
            return
        result: Any = None
        error: BaseException | None = None
        if call is not None:
            call.ran = perf_counter_ns()
            self.running[id(call)] = call
        try:
            result = ctx.run(fn, *args, **kwargs)
        except Exception as exc:  # handed to the awaiting task
            keep_origin(exc)
            error = exc
        except BaseException as exc:  # SystemExit... would stop the server's loop
            error = RuntimeError(f"the model raised {type(exc).__name__}: {exc}")
        if call is not None:
            call.done = perf_counter_ns()
            self.running.pop(id(call), None)
        with contextlib.suppress(RuntimeError):  # a closed loop: nobody awaits it
            loop.call_soon_threadsafe(_settle, future, result, error)


def _settle(future: asyncio.Future[Any], result: Any, error: BaseException | None) -> None:
    if future.cancelled():
        return
    if error is None:
        future.set_result(result)
    else:
        future.set_exception(error)


_loader: ThreadInstances | None = None


async def run_loading(fn: Callable[..., T], *args: Any) -> T:
    """Run a model's load or unload on the loading threads (never a model's own instances)."""
    global _loader  # noqa: PLW0603 - one loading pool, created lazily
    if _loader is None:
        _loader = ThreadInstances("loading", LOADER_THREADS)
    result: T = await _loader.run(fn, *args)
    return result


_request_work: ThreadInstances | None = None
# A loop of compiled code over many elements calls ``let_others_run`` when its count has these
# low bits set: every 4,096 elements (~1-2 ms).
LET_OTHERS_RUN: Final = 0xFFF


def let_others_run() -> None:
    """Hand the interpreter to a thread waiting for it (the event loop's), if one is: what a
    long loop of compiled code calls now and then. The interpreter offers a waiting thread its
    turn between bytecodes only, which compiled code (mypyc's) has none of: a loop over millions
    of elements on the request-work threads would hold the event loop throughout. time.sleep(0)
    lets go of the interpreter, and a thread that asked for it takes it then."""
    time.sleep(0)


async def run_request_work(fn: Callable[..., T], *args: Any) -> T:
    """Run a request's large work (``fn(*args)``) on the request-work threads: the event loop
    answers other requests meanwhile (between the interpreter's switches, or all along while
    ``fn`` is in C code that lets go of the interpreter: zlib, the tokenizers)."""
    global _request_work  # noqa: PLW0603 - one pool, created lazily
    if _request_work is None:
        _request_work = ThreadInstances("request-work", REQUEST_WORK_THREADS)
    result: T = await _request_work.run(fn, *args)
    return result


async def run_sized(size: int, fn: Callable[..., T], *args: Any) -> T:
    """``fn(*args)``, the parsing of a request body of ``size`` bytes: in place when the body
    is small (a thread's round trip would cost more), on the request-work threads when not."""
    if size <= INLINE_BODY_BYTES:
        return fn(*args)
    return await run_request_work(fn, *args)
