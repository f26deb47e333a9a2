"""The scheduler's view of its instances: health, load, choice, and one /dresult reader per D.

Everything here is rebuilt from the instances themselves: health from ``GET /v1/status``
(polled) and from whether a decode instance's ``/dresult`` is connected; load from the
scheduler's own counts of what it sent where, plus the decode instances' reported KV in use.
A scheduler restart therefore loses only its in-flight requests (their clients were
connected to it).

Choice (``policy="load"``): the prefill instance with the least outstanding prompt work (body
bytes sent and not yet answered), the decode instance with the fewest active sequences, then
the least KV in use; ties go round-robin. ``policy="round-robin"`` ignores load (for tests).

Instances given by DNS name (a headless Service) come and go with the name's addresses
(discovery.py): one leaving is chosen for nothing new, and a decode instance leaves once the
requests it holds are done (a pod being stopped drains them, then ends its /dresult stream).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import orjson

from rosettaserve.pd.discovery import DEFAULT_INTERVAL_S, Resolver, is_name, resolve
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
    source: str = ""  # the DNS-named URL it was found through ("": given as it is)
    listed: bool = True  # False: its name no longer has its address (it is leaving)

    def __post_init__(self) -> None:
        self.address = Address.parse(self.url)

    def down(self, why: str) -> None:
        if self.healthy:
            log.warning("%s instance %s is down: %s", self.role, self.address, why)
        self.healthy, self.error = False, why

    def view(self) -> dict[str, Any]:
        keys: tuple[str, ...] = ("url", "role", "healthy", "outstanding", "active", "kv_tokens")
        keys += ("running", "error", "source", "listed")
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
        discovery_s: float = DEFAULT_INTERVAL_S,
        resolver: Resolver = resolve,
    ) -> None:
        self.prefill: list[Instance] = []
        self.decode: list[Instance] = []
        self.names: list[tuple[str, str]] = []  # (role, URL) of the URLs that name a host
        for role, urls in (("prefill", prefill), ("decode", decode)):
            for url in urls:
                if is_name(Address.parse(url).host):
                    self.names.append((role, url))
                elif not self._known(role, Address.parse(url)):
                    self._members(role).append(Instance(url, role))
        self.policy = policy
        self.on_frame, self.on_lost = on_frame, on_lost
        self.poll_s, self.discovery_s, self.resolver = poll_s, discovery_s, resolver
        self._turn = {"prefill": 0, "decode": 0}
        self._tasks: list[asyncio.Task[None]] = []
        self._readers: dict[Instance, asyncio.Task[None]] = {}
        self._started = False

    def _members(self, role: str) -> list[Instance]:
        return self.prefill if role == "prefill" else self.decode

    def _known(self, role: str, address: Address) -> Instance | None:
        """The instance of ``role`` at that host and port, if there is one."""
        for instance in self._members(role):
            if (instance.address.host, instance.address.port) == (address.host, address.port):
                return instance
        return None

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
        ok = [i for i in rotated if i.healthy and i.listed and i not in exclude]
        if not ok:
            return None
        chosen = ok[0] if self.policy == "round-robin" else min(ok, key=load)
        self._turn[role] = pool.index(chosen) + 1
        return chosen

    # -- watching --------------------------------------------------------------------------------

    def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._started = True
        self._tasks = [loop.create_task(self._poll())]
        if self.names:
            self._tasks.append(loop.create_task(self._watch_names()))
        for d in self.decode:
            self._readers[d] = loop.create_task(self._read(d))

    async def stop(self) -> None:
        tasks = self._tasks + list(self._readers.values())
        self._readers.clear()
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task

    # -- instances by name -----------------------------------------------------------------------

    async def _watch_names(self) -> None:
        while True:
            await self.discover()
            await asyncio.sleep(self.discovery_s)

    async def discover(self) -> None:
        """One round: each DNS-named URL looked up again, the pool brought in line with it."""
        for role, url in self.names:
            named = Address.parse(url)
            try:
                hosts = await self.resolver(named.host, named.port)
            except OSError as exc:
                log.warning("cannot resolve %s (%s); its instances stay as they were", url, exc)
                continue
            scheme = url.split("://", 1)[0] if "://" in url else "http"
            found = [f"{scheme}://{Address(host, named.port)}" for host in hosts]
            self._sync(role, url, found)
        self._retire()

    def _sync(self, role: str, source: str, urls: list[str]) -> None:
        now = {(a.host, a.port) for a in map(Address.parse, urls)}
        for url in urls:
            known = self._known(role, Address.parse(url))
            if known is None:
                log.info("%s instance %s found through %s", role, url, source)
                self._add(Instance(url, role, source=source))
            elif known.source == source and not known.listed:
                log.info("%s instance %s is back in %s", role, url, source)
                known.listed = True
        for instance in self._members(role):
            gone = (instance.address.host, instance.address.port) not in now
            if instance.source == source and instance.listed and gone:
                log.info("%s instance %s left %s", role, instance.url, source)
                instance.listed = False

    def _add(self, instance: Instance) -> None:
        self._members(instance.role).append(instance)
        if instance.role == "decode" and self._started:
            self._readers[instance] = asyncio.get_running_loop().create_task(self._read(instance))

    def _retire(self) -> None:
        """Drop the instances that left their name and hold no request of this scheduler."""
        for pool in (self.prefill, self.decode):
            for instance in [i for i in pool if not i.listed and i.active == 0]:
                pool.remove(instance)
                reader = self._readers.pop(instance, None)
                if reader is not None:
                    reader.cancel()

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
