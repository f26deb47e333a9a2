"""``within``: a result, a TimeoutError (the awaitable cancelled), and every cancel of the
caller kept, also outside any task (as the HTTP server steps handlers)."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any

import pytest

from rosettaserve.core.timeouts import within


def test_the_result_and_the_error_come_through() -> None:
    async def fail() -> None:
        raise ValueError("inner")

    async def scenario() -> None:
        assert await within(asyncio.sleep(0, "done"), 5) == "done"
        with pytest.raises(ValueError, match="inner"):
            await within(fail(), 5)

    asyncio.run(scenario())


def test_too_long_is_a_timeout_and_the_awaitable_is_cancelled() -> None:
    async def scenario() -> None:
        slow = asyncio.ensure_future(asyncio.sleep(30))
        with pytest.raises(TimeoutError):
            await within(slow, 0.01)
        assert slow.cancelled()

    asyncio.run(scenario())


def test_a_cancel_in_the_turn_the_awaitable_finishes_is_kept() -> None:
    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        attempt: asyncio.Future[str] = loop.create_future()
        task = loop.create_task(within(attempt, 5))
        await asyncio.sleep(0)  # the task waits on the attempt
        attempt.set_result("finished")
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(scenario())


def test_no_task_is_needed() -> None:
    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        outcome: asyncio.Future[Any] = loop.create_future()
        coro: Coroutine[Any, Any, str] = within(asyncio.sleep(0.01, "stepped"), 5)

        def step(value: object = None) -> None:  # drive it by hand, as the HTTP server does
            try:
                yielded = coro.send(value)
            except StopIteration as stop:
                outcome.set_result(stop.value)
                return
            yielded._asyncio_future_blocking = False
            yielded.add_done_callback(lambda _: step())

        step()
        assert await outcome == "stepped"

    asyncio.run(scenario())
