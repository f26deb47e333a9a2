"""The scheduler's view of its instances: health, load, choice, and one /dresult reader per D.

Everything here is rebuilt from the instances themselves: health from ``GET /v1/status``
(polled) and from whether a decode instance's ``/dresult`` is connected; load from the
scheduler's own counts of what it sent where, plus the decode instances' reported KV in use.
A scheduler restart therefore loses only its in-flight requests (their clients were
connected to it).

Choice (``policy="load"``): the prefill instance with the least outstanding prompt work (body
bytes sent and not yet answered), the decode instance with the fewest active sequences, then
the least KV in use; ties go round-robin. ``policy="round-robin"`` ignores load (for tests).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import orjson

from rosettaserve.pd.http_client import Address, HttpClientError, Response, fetch, request
from rosettaserve.pd.wire import CLOSE, Frame, FrameParser

log = logging.getLogger("rosettaserve.pd.scheduler")
RECONNECT_S = 0.5


@dataclass(eq=False)
class Instance:
    url: str
    role: str  # prefill | decode
    address: Address = field(init=False)
    healthy: bool = False
    outstanding: int = 0  # prefill: request bytes sent and not answered yet
    active: int = 0  # decode: requests it is decoding for this scheduler
    kv_tokens: int = 0  # decode: KV cache tokens in use, as last reported
    running: int = 0  # sequences running, as last reported
    error: str = ""  # why it is not healthy
    connections: int = 0  # decode: /dresult connections made
    failures: int = 0  # status polls failed in a row

    def __post_init__(self) -> None:
        self.address = Address.parse(self.url)

    def down(self, why: str) -> None:
        if self.healthy:
            log.warning("%s instance %s is down: %s", self.role, self.address, why)
        self.healthy, self.error = False, why

    def view(self) -> dict[str, Any]:
        keys = ("url", "role", "healthy", "outstanding", "active", "kv_tokens", "running", "error")
        return {k: getattr(self, k) for k in keys} | {"dresult_connections": self.connections}


FrameSink = Callable[[Instance, Frame], None]
LostSink = Callable[[Instance, str], None]


class Pool:
    def __init__(
        self,
        prefill: list[str],
        decode: list[str],
        policy: str,
        *,
        on_frame: FrameSink,
        on_lost: LostSink,
        poll_s: float = 1.0,
    ) -> None:
        self.prefill = [Instance(url, "prefill") for url in prefill]
        self.decode = [Instance(url, "decode") for url in decode]
        self.policy = policy
        self.on_frame, self.on_lost = on_frame, on_lost
        self.poll_s = poll_s
        self._turn = {"prefill": 0, "decode": 0}
        self._tasks: list[asyncio.Task[None]] = []

    # -- choosing --------------------------------------------------------------------------------

    def pick_prefill(self, exclude: set[Instance]) -> Instance | None:
        return self._pick(self.prefill, exclude, lambda i: (i.outstanding,))

    def pick_decode(self, exclude: set[Instance]) -> Instance | None:
        return self._pick(self.decode, exclude, lambda i: (i.active, i.kv_tokens))

    def _pick(
        self, pool: list[Instance], exclude: set[Instance], load: Callable[[Instance], Any]
    ) -> Instance | None:
        role = pool[0].role if pool else ""
        turn = self._turn.get(role, 0)
        rotated = pool[turn % len(pool) :] + pool[: turn % len(pool)] if pool else []
        ok = [i for i in rotated if i.healthy and i not in exclude]
        if not ok:
            return None
        chosen = ok[0] if self.policy == "round-robin" else min(ok, key=load)
        self._turn[role] = pool.index(chosen) + 1
        return chosen

    # -- watching --------------------------------------------------------------------------------

    def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._tasks = [loop.create_task(self._poll())]
        self._tasks += [loop.create_task(self._read(d)) for d in self.decode]

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _poll(self) -> None:
        while True:
            await asyncio.gather(*(self._status(i) for i in self.prefill + self.decode))
            await asyncio.sleep(self.poll_s)

    async def _status(self, instance: Instance) -> None:
        """Load figures of every instance; health of prefill instances (a decode instance is
        healthy while its /dresult stream is open)."""
        try:
            status, _, body = await fetch(instance.address, "GET", "/v1/status", timeout=2.0)
            doc = orjson.loads(body) if status == 200 else {}
        except (HttpClientError, orjson.JSONDecodeError) as exc:
            instance.failures += 1
            if instance.role == "prefill" and instance.failures >= 2:
                instance.down(str(exc))
            return
        instance.failures = 0
        service, resource = doc.get("service") or {}, doc.get("resource") or {}
        instance.running = int(resource.get("runningRequestNum") or 0)
        instance.kv_tokens = int(resource.get("kvTokensInUse") or 0)
        if instance.role != "prefill":
            return
        if service.get("currentRole") != "prefill":
            instance.down(f"its role is {service.get('currentRole')!r}, not prefill")
        elif service.get("roleStatus") != "RoleReady":
            instance.down("it is not ready")
        elif not instance.healthy:
            log.info("prefill instance %s is up", instance.address)
            instance.healthy, instance.error = True, ""

    async def _read(self, d: Instance) -> None:
        """Keep one /dresult stream open to ``d``; its frames go to ``on_frame``."""
        while True:
            response: Response | None = None
            try:
                response = await request(d.address, "GET", "/dresult", timeout=5.0)
                if response.status != 200:
                    raise HttpClientError(f"GET /dresult answered {response.status}")
                d.connections += 1
                d.healthy, d.error = True, ""
                log.info("decode instance %s is up (/dresult connected)", d.address)
                await self._frames(d, response)
                why = "its /dresult stream ended"
            except (HttpClientError, ValueError) as exc:
                why = str(exc)
            finally:
                if response is not None:
                    response.close()
            was_up = d.healthy
            d.down(why)
            if was_up:
                self.on_lost(d, why)
            await asyncio.sleep(RECONNECT_S)

    async def _frames(self, d: Instance, response: Response) -> None:
        parser = FrameParser()
        async for chunk in response.chunks():
            for frame in parser.feed(chunk):
                if frame.kind == CLOSE:
                    return  # another reader took over
                self.on_frame(d, frame)
