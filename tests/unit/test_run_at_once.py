"""The run-at-once contract (core/run_at_once.py), as the servers' driver (transport/eager.py)
keeps it and as a handler's bounded wait relies on it."""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Callable, Coroutine
from typing import Any

import pytest

from rosettaserve.core.run_at_once import FINISHED, Driver, Resumable, bounded
from rosettaserve.transport.eager import EAGER

DRIVER: Driver = EAGER
WHO: contextvars.ContextVar[str] = contextvars.ContextVar("who", default="")


def run(scenario: Callable[[], Coroutine[Any, Any, None]]) -> None:
    asyncio.run(scenario())


def test_a_handler_that_never_waits_finishes_in_its_first_step_outside_any_task() -> None:
    seen: list[object] = []

    async def handler() -> None:
        seen.append(asyncio.current_task())

    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        # the first step is driven from a plain callback, as a server's read callback is
        stepped: asyncio.Future[Any] = loop.create_future()
        coroutine = handler()
        loop.call_soon(lambda: stepped.set_result(DRIVER.first_step(coroutine, copy())))
        assert await stepped is FINISHED
        assert seen == [None]

    run(scenario)


def test_an_exception_of_the_first_step_comes_out_of_it() -> None:
    async def handler() -> None:
        raise ValueError("bad request")

    async def scenario() -> None:
        with pytest.raises(ValueError, match="bad request"):
            DRIVER.first_step(handler(), copy())

    run(scenario)


def test_a_handler_that_waits_is_adopted_by_a_task_that_resumes_it_in_its_context() -> None:
    async def handler(gate: asyncio.Future[str]) -> str:
        WHO.set("request 7")
        opened = await gate
        return f"{opened} for {WHO.get()}"

    async def scenario() -> None:
        gate: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        coroutine, context = handler(gate), copy()
        waits_for = DRIVER.first_step(coroutine, context)
        assert waits_for is gate
        task = DRIVER.adopt(coroutine, waits_for, context)
        gate.set_result("opened")
        assert await task == "opened for request 7"

    run(scenario)


def test_an_exception_after_the_first_wait_comes_out_of_the_task() -> None:
    async def handler() -> None:
        await asyncio.sleep(0)
        raise KeyError("later")

    async def scenario() -> None:
        coroutine, context = handler(), copy()
        task = DRIVER.adopt(coroutine, DRIVER.first_step(coroutine, context), context)
        with pytest.raises(KeyError, match="later"):
            await task

    run(scenario)


def test_a_task_cancelled_before_its_first_step_unwinds_the_handler_and_drops_its_wait() -> None:
    unwound: list[str] = []

    async def handler(gate: asyncio.Future[None]) -> None:
        try:
            await gate
        finally:
            unwound.append("finally")

    async def scenario() -> None:
        gate: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        coroutine, context = handler(gate), copy()
        task = DRIVER.adopt(coroutine, DRIVER.first_step(coroutine, context), context)
        task.cancel()  # the client left in the same read as its request
        with pytest.raises(asyncio.CancelledError):
            await task
        assert unwound == ["finally"]
        assert gate.cancelled()

    run(scenario)


def test_a_wait_for_a_resumable_may_be_driven_on_from_its_callback_without_a_task() -> None:
    seen: list[object] = []

    async def handler(batch: Resumable) -> str:
        result = await batch
        seen.append(asyncio.current_task())
        return f"rows {result}"

    async def scenario() -> None:
        batch = Resumable()
        coroutine = handler(batch)
        steps = coroutine.__await__()
        assert copy().run(next, steps, FINISHED) is batch
        answered: asyncio.Future[str] = asyncio.get_running_loop().create_future()

        def resume(_: Any) -> None:
            try:
                next(steps)
            except StopIteration as stop:
                answered.set_result(stop.value)

        batch._asyncio_future_blocking = False  # (as a task awaiting it would)
        batch.add_done_callback(resume)
        batch.set_result("0-3")
        assert await answered == "rows 0-3"
        assert seen == [None]

    run(scenario)


def test_a_bounded_wait_gives_the_result_when_it_comes_in_time() -> None:
    async def scenario() -> None:
        far = asyncio.get_running_loop().time() + 3600
        assert await bounded(asyncio.sleep(0, "done"), far) == "done"

    run(scenario)


def test_a_bounded_wait_past_its_deadline_is_a_timeout_and_its_awaitable_unwinds() -> None:
    unwound: list[str] = []

    async def queued(gate: asyncio.Future[None]) -> None:
        try:
            await gate
        finally:
            unwound.append("left the queue")

    async def scenario() -> None:
        gate: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        past = asyncio.get_running_loop().time() - 1
        with pytest.raises(TimeoutError):
            await bounded(queued(gate), past)
        assert unwound == ["left the queue"]
        assert gate.cancelled()

    run(scenario)


def test_a_bounded_wait_times_out_in_a_handler_that_no_task_ever_drives() -> None:
    seen: list[object] = []

    async def handler(batch: Resumable) -> str:
        try:
            return str(await bounded(batch, asyncio.get_running_loop().time() - 1))
        except TimeoutError:
            seen.append(asyncio.current_task())
            return "504"

    async def scenario() -> None:
        batch = Resumable()
        steps = handler(batch).__await__()
        answered: asyncio.Future[str] = asyncio.get_running_loop().create_future()

        def resume(future: Any) -> None:  # as the HTTP/1.1 server drives a batched request on
            try:
                steps.throw(asyncio.CancelledError()) if future.cancelled() else next(steps)
            except StopIteration as stop:
                answered.set_result(stop.value)

        def first() -> None:
            assert copy().run(next, steps, FINISHED) is batch
            batch._asyncio_future_blocking = False
            batch.add_done_callback(resume)

        asyncio.get_running_loop().call_soon(first)
        assert await answered == "504"
        assert seen == [None]
        assert batch.cancelled()

    run(scenario)


def test_a_bounded_wait_whose_deadline_passes_at_a_bare_yield_times_out_at_the_next_step() -> None:
    async def spins() -> str:
        for _ in range(100):  # the deadline's timer runs in the loop's next round
            await asyncio.sleep(0)
        return "never stopped"

    async def scenario() -> None:
        with pytest.raises(TimeoutError):
            await bounded(spins(), asyncio.get_running_loop().time() - 1)

    run(scenario)


def test_a_task_cancel_that_lands_with_the_deadline_stays_a_cancel() -> None:
    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        gate: asyncio.Future[None] = loop.create_future()
        bound = bounded(gate, loop.time() + 3600)
        task = loop.create_task(_await(bound))
        await asyncio.sleep(0)  # the task waits on the gate
        bound._expire()  # the deadline's timer, in the turn the client leaves
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    run(scenario)


async def _await(awaitable: Any) -> Any:
    return await awaitable


def copy() -> contextvars.Context:
    return contextvars.copy_context()
