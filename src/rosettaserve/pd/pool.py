"""The scheduler's view of its instances: health, load, choice, and one /dresult reader per D.

Everything here is rebuilt from the instances themselves: readiness from ``GET /v1/status``
(polled: the role status, and the state of every LLM model's versions), and for a decode
instance whether its ``/dresult`` is connected too; load from the scheduler's own counts of
what it sent where, plus the decode instances' reported KV in use. A scheduler restart
therefore loses only its in-flight requests (their clients were connected to it).

An instance is chosen only while it is healthy: its last status said it is ready in its role
(and a decode instance's ``/dresult`` is open: a decode instance that reconnects after a
restart waits for a status that says so again, since its models load after it listens). A
request goes to an instance where the model it names is READY; the model is read from the
request only when the instances differ in what they have ready (models loading, or not the
same models everywhere).

Choice (``policy="load"``): the prefill instance with the least outstanding prompt work (body
bytes sent and not yet answered), the decode instance with the fewest active sequences, then
the least KV in use; ties go round-robin. ``policy="prefix"`` (the default) chooses the prefill
instance by its outstanding work plus the part of the prompt it does not hold in its prefix
cache (prefix_affinity.py: as the instance's status reports it, else as the scheduler guesses
from what it sent where), the decode instance as ``load`` does. ``policy="round-robin"``
ignores load (for tests).

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
from rosettaserve.pd.http_client import Address, HttpClientError, PeerClient, Response
from rosettaserve.pd.prefix_affinity import PrefixTable
from rosettaserve.pd.prefix_report import read_report
from rosettaserve.pd.wire import CLOSE, Frame, FrameParser
from rosettaserve.web.routing import HttpRequest

log = logging.getLogger("rosettaserve.pd.scheduler")
RECONNECT_S = 0.5
READY = "READY"
Models = dict[str, dict[str, str]]  # model name -> version -> state ("READY", "LOADING", ...)
Wanted = tuple[str, str]  # the model a request names and its version ("": the instance's first)
WantedOf = Callable[[], Wanted]  # the model of a request, read from it only when needed


BlocksOf = Callable[[], list[bytes]]  # a request's prompt blocks, read when needed


def _no_blocks() -> list[bytes]:
    return []


def _any_model() -> Wanted:
    return ("", "")


def model_of(req: HttpRequest) -> Wanted:
    """The model a family request names, and its version: the route's (Triton's
    ``/v2/models/{m}[/versions/{v}]``), else the body's ``model``; ``""`` when it names none (the
    instance's first LLM model serves it), as the families' handlers read them. The scheduler
    forwards bodies without reading them otherwise."""
    if "model" in req.params:
        return req.params["model"], req.params.get("version") or ""
    try:
        doc = orjson.loads(req.body)
    except orjson.JSONDecodeError:
        return "", ""  # the prefill instance answers the family's 400
    model = doc.get("model") if isinstance(doc, dict) else None
    return (model, "") if isinstance(model, str) else ("", "")


@dataclass(eq=False)
class Instance:
    url: str
    role: str  # prefill | decode
    address: Address = field(init=False)
    healthy: bool = False  # chosen for new requests: ready, and (decode) its /dresult open
    ready: bool = False  # its last status said it serves in its role
    streaming: bool = False  # decode: its /dresult stream is open
    models: Models | None = None  # its LLM models, as last reported (None: it reports none)
    epoch: int = 0  # decode: /dresult (dis)connections; a status read across one is stale
    outstanding: int = 0  # prefill: request bytes sent and not answered yet
    active: int = 0  # decode: requests it is decoding for this scheduler
    kv_tokens: int = 0  # decode: KV cache tokens in use, as last reported
    running: int = 0  # sequences running, as last reported
    error: str = ""  # why it is not healthy
    connections: int = 0  # decode: /dresult connections made
    failures: int = 0  # status polls failed in a row
    statuses: int = 0  # status polls answered
    source: str = ""  # the DNS-named URL it was found through ("": given as it is)
    listed: bool = True  # False: its name no longer has its address (it is leaving)
    prefix_blocks: int | None = None  # prefill: prefixes its cache holds, as last reported

    def __post_init__(self) -> None:
        self.address = Address.parse(self.url)

    def down(self, why: str) -> None:
        """Not ready until a status says so again."""
        self.ready = False
        self.settle(why)

    def settle(self, why: str = "") -> None:
        """``healthy`` from what is known; a change is logged (``why``: what went wrong)."""
        healthy = self.ready and (self.streaming or self.role != "decode")
        if healthy and not self.healthy:
            log.info("%s instance %s is up", self.role, self.address)
        elif self.healthy and not healthy:
            log.warning("%s instance %s is down: %s", self.role, self.address, why)
        self.healthy = healthy
        self.error = "" if healthy else why or self.error

    def state(self, wanted: Wanted) -> str:
        """The state of the model version a request names here ("": it has no such model)."""
        if self.models is None:
            return READY  # an instance that does not say: as ready as its role status
        name, version = wanted
        versions = self.models.get(name or min(self.models, default=""))
        if not versions:
            return ""
        if version:
            return versions.get(version, "")
        return READY if READY in versions.values() else next(iter(versions.values()))

    @property
    def settled(self) -> bool:
        """Every model it reported is READY (and so serves what it has)."""
        return self.models is None or all(
            state == READY for versions in self.models.values() for state in versions.values()
        )

    def view(self) -> dict[str, Any]:
        keys: tuple[str, ...] = ("url", "role", "healthy", "ready", "outstanding", "active")
        keys += ("kv_tokens", "running", "error", "source", "listed", "models", "statuses")
        keys += ("prefix_blocks",)
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
        client: PeerClient,
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
        self.prefixes = PrefixTable()  # where prompts' prefixes were prefilled (policy prefix)
        self.on_frame, self.on_lost = on_frame, on_lost
        self.client = client  # how the instances are reached (TLS, the peer key)
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

    def pick_prefill(
        self,
        exclude: set[Instance],
        wanted: WantedOf = _any_model,
        blocks: BlocksOf = _no_blocks,
    ) -> Instance | None:
        """``blocks``: the request's prompt blocks (prefix_affinity.py), read only under the
        prefix policy."""
        return self._pick(self.prefill, exclude, lambda i: (i.outstanding,), wanted, blocks)

    def pick_decode(self, exclude: set[Instance], wanted: WantedOf = _any_model) -> Instance | None:
        return self._pick(self.decode, exclude, lambda i: (i.active, i.kv_tokens), wanted)

    def pick_any(self, exclude: set[Instance], wanted: WantedOf) -> Instance | None:
        """For a request one instance serves whole (embeddings, rerank): an instance of either
        role where its model is READY, the one with the fewest request bytes outstanding."""
        members = [i for i in self.prefill + self.decode if i.healthy and i.listed]
        ok = [i for i in self.serving(members, wanted) if i not in exclude]
        return min(ok, key=lambda i: i.outstanding) if ok else None

    def _pick(
        self,
        pool: list[Instance],
        exclude: set[Instance],
        load: Callable[[Instance], Any],
        wanted: WantedOf,
        blocks: BlocksOf | None = None,
    ) -> Instance | None:
        role = pool[0].role if pool else ""
        turn = self._turn.get(role, 0)
        rotated = pool[turn % len(pool) :] + pool[: turn % len(pool)] if pool else []
        ok = self.serving([i for i in rotated if i.healthy and i.listed], wanted)
        ok = [i for i in ok if i not in exclude]
        if not ok:
            return None
        if self.policy == "prefix" and blocks is not None:
            held = blocks()
            chosen = self.prefixes.choose(ok, held)
            self.prefixes.remember(held, chosen.url)
        else:
            chosen = ok[0] if self.policy == "round-robin" else min(ok, key=load)
        self._turn[role] = pool.index(chosen) + 1
        return chosen

    def serving(self, candidates: list[Instance], wanted: WantedOf) -> list[Instance]:
        """The candidates where the request's model is READY. The request is read (``wanted``)
        only when the healthy instances differ in what they have ready; a model none of them
        knows goes to any (the prefill instance answers it as a mixed instance would)."""
        if self._uniform():
            return candidates
        want = wanted()
        states = [(i, i.state(want)) for i in candidates]
        ready = [i for i, state in states if state == READY]
        return ready if ready or any(state for _, state in states) else candidates

    def unavailable(self, role: str, exclude: set[Instance], wanted: WantedOf) -> str:
        """Why no instance of ``role`` can take the request (the message of its 503)."""
        members = self._members(role)
        healthy = [i for i in members if i.healthy and i.listed]
        if not healthy:
            why = "; ".join(f"{i.address}: {i.error or 'no status yet'}" for i in members[:3])
            return f"no {role} instance is ready ({why or 'none is known'})"
        if all(i in exclude for i in healthy):
            return f"every ready {role} instance was tried"
        name, version = wanted()
        model = f"model '{name}'" if name else "the model"
        model += f" version {version}" if version else ""
        states = ", ".join(sorted({i.state((name, version)) or "absent" for i in healthy}))
        return f"{model} is not ready on any {role} instance ({states})"

    def _uniform(self) -> bool:
        """Every healthy instance has every model it reported READY, the same ones everywhere."""
        healthy = [i for i in self.prefill + self.decode if i.healthy]
        if not all(i.settled for i in healthy):
            return False
        held = {_versions(i.models) for i in healthy if i.models is not None}
        return len(held) <= 1

    def ready(self, model: str = "") -> bool:
        """A healthy prefill and a healthy decode instance have ``model`` READY (""; any one
        model): the scheduler can serve it."""
        prefill = [i for i in self.prefill if i.healthy and i.listed]
        decode = [i for i in self.decode if i.healthy and i.listed]
        if model:
            want = (model, "")
            return any(i.state(want) == READY for i in prefill) and any(
                i.state(want) == READY for i in decode
            )
        return any(_common(p, d) for p in prefill for d in decode)

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
                self.prefixes.report(instance.url, None, 0)  # (its report: kept no longer)
                reader = self._readers.pop(instance, None)
                if reader is not None:
                    reader.cancel()

    async def _poll(self) -> None:
        while True:
            await asyncio.gather(*(self._status(i) for i in self.prefill + self.decode))
            await asyncio.sleep(self.poll_s)

    async def _status(self, instance: Instance) -> None:
        """Load figures, readiness and model states of one instance."""
        epoch, stamp = instance.epoch, self.prefixes.stamp
        try:
            status, _, body = await self.client.fetch(
                instance.address, "GET", "/v1/status", timeout=2.0
            )
            doc = orjson.loads(body) if status == 200 else {}
        except (HttpClientError, orjson.JSONDecodeError) as exc:
            instance.failures += 1
            if instance.failures >= 2:
                instance.down(str(exc))
            return
        if instance.epoch != epoch:
            return  # its /dresult broke or came back meanwhile: maybe another process's status
        instance.failures = 0
        instance.statuses += 1
        read_status(instance, doc)
        if instance.role == "prefill" and self.policy == "prefix":
            held = read_report(doc)
            self.prefixes.report(instance.url, held, stamp)
            instance.prefix_blocks = None if held is None else len(held)

    async def _read(self, d: Instance) -> None:
        """Keep one /dresult stream open to ``d``; its frames go to ``on_frame``."""
        while True:
            response: Response | None = None
            try:
                response = await self.client.request(d.address, "GET", "/dresult", timeout=5.0)
                if response.status != 200:
                    raise HttpClientError(f"GET /dresult answered {response.status}")
                d.connections += 1
                d.epoch += 1
                d.streaming = True
                log.info("decode instance %s: /dresult connected", d.address)
                d.settle()
                await self._frames(d, response)
                why = "its /dresult stream ended"
            except (HttpClientError, ValueError) as exc:
                why = str(exc)
            finally:
                if response is not None:
                    response.close()
            if d.streaming:  # a restarted process is ready only once its status says so
                d.streaming = False
                d.epoch += 1
                d.down(why)
                self.on_lost(d, why)
            await asyncio.sleep(RECONNECT_S)

    async def _frames(self, d: Instance, response: Response) -> None:
        parser = FrameParser()
        async for chunk in response.chunks():
            for frame in parser.feed(chunk):
                if frame.kind == CLOSE:
                    return  # another reader took over
                self.on_frame(d, frame)


def read_status(instance: Instance, doc: Any) -> None:
    """What a ``GET /v1/status`` document (any JSON value) says of ``instance``: its load, its
    models' states, and whether it is ready in its role."""
    doc = doc if isinstance(doc, dict) else {}
    resource = doc.get("resource")
    resource = resource if isinstance(resource, dict) else {}
    instance.running = _count(resource.get("runningRequestNum"))
    instance.kv_tokens = _count(resource.get("kvTokensInUse"))
    instance.models = _models(doc.get("models"))
    why = _not_ready(instance.role, doc.get("service"))
    instance.ready = not why
    instance.settle(why)


def _not_ready(role: str, service: Any) -> str:
    """Why a status's ``service`` part says the instance cannot serve in ``role`` ("": it can)."""
    service = service if isinstance(service, dict) else {}
    if service.get("currentRole") != role:
        return f"its role is {service.get('currentRole')!r}, not {role}"
    if service.get("roleStatus") != "RoleReady":
        return f"it is not ready (role status {service.get('roleStatus')!r})"
    return ""


def _models(value: Any) -> Models | None:
    """A status's ``models``: {name: {version: state}} (anything else: not reported)."""
    if not isinstance(value, dict):
        return None
    return {
        str(name): {str(v): str(s) for v, s in versions.items()}
        for name, versions in value.items()
        if isinstance(versions, dict)
    }


def _versions(models: Models | None) -> frozenset[tuple[str, str]]:
    return frozenset((n, v) for n, versions in (models or {}).items() for v in versions)


def _common(p: Instance, d: Instance) -> bool:
    """A model is READY on both (an instance that reports no models serves any)."""
    if p.models is None and d.models is None:
        return True
    names = {*(p.models or {}), *(d.models or {})}
    return any(p.state((name, "")) == READY == d.state((name, "")) for name in names)


def _count(value: Any) -> int:
    return max(0, value) if isinstance(value, int) and not isinstance(value, bool) else 0
