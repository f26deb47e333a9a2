"""A PD task cancelled in the very turn its connection attempt fails is cancelled: the
scheduler's status polls and /dresult readers are stopped that way on SIGTERM. Python 3.11's
``asyncio.wait_for`` turned such a cancel into the attempt's error, the reader retried, and the
stopping scheduler never ended (seen once in CI); ruff now bans ``wait_for`` in src/."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from rosettaserve.pd.http_client import Address, PeerClient


def test_a_cancel_landing_with_a_refused_connection_is_kept(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        attempt: asyncio.Future[Any] = loop.create_future()
        waiting = asyncio.Event()

        async def connect(*args: object, **kwargs: object) -> Any:
            waiting.set()
            return await attempt

        monkeypatch.setattr(asyncio, "open_connection", connect)  # what http_client calls
        address = Address.parse("http://127.0.0.1:9")
        task = loop.create_task(PeerClient().fetch(address, "GET", "/v1/status", timeout=2.0))
        await waiting.wait()
        attempt.set_exception(ConnectionRefusedError(111, "Connection refused"))
        task.cancel()  # the same turn: the refusal and the cancel are both pending
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(scenario())
