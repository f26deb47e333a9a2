"""A serving instance's PD role: what ``--role mixed|prefill|decode`` does to its HTTP routes.

The server registers the LLM families' routes itself (protocols/families.py); ``wrap`` gives
their POST routes to the role:
- ``prefill``: they need the PD headers (prefill.py);
- ``mixed`` and ``decode``: served whole; one with ``req-type`` is a 400 (not a prefill
  instance).

``routes`` are the role's own:
- every role: ``GET /v1/status`` (MindIE's shape: role, role status, slots, KV in use; ours:
  the state of every LLM model's versions), which the scheduler polls for health and load
  (counts only: no request id is listed); a prefill instance's, asked by a peer (its peer key,
  as for ``pd-tenant``), says which prompt prefixes its engines' prefix caches hold, by hash
  (prefix_report.py);
- ``prefill``: ``GET`` and ``DELETE /v1/pd/kv/{reqId}`` serve the held caches;
- ``decode``: ``POST /v1/pd/decode``, ``GET /dresult`` (decode.py); ``GET /dresult`` on any
  other role is a 400.

``prefill`` and ``decode`` contact only their known peers (``--peer-allow``, peers.py).
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

from rosettaserve.core.embedding import EMBEDDING_RUNTIMES
from rosettaserve.core.errors import InvalidInput
from rosettaserve.core.generation_plane import TEXT_RUNTIMES, GenerationPlane
from rosettaserve.core.pd_engine import pd_engine
from rosettaserve.pd.http_client import Address, PeerClient
from rosettaserve.pd.options import PdOptions
from rosettaserve.pd.peers import KnownPeers, parse_peer
from rosettaserve.pd.prefix_report import FIELD
from rosettaserve.pd.wire import REQ_TYPE
from rosettaserve.protocols import families
from rosettaserve.web.routing import HttpRequest, HttpResponse, Route, json_response

if TYPE_CHECKING:
    from rosettaserve.pd.decode import DecodeRole
    from rosettaserve.pd.prefill import PrefillRole

log = logging.getLogger("rosettaserve.pd")
SERVED_RUNTIMES = TEXT_RUNTIMES + EMBEDDING_RUNTIMES  # the models the scheduler routes to
# the routes a PD role splits: every family's POST endpoints (not the ones served whole)
SPLIT = {("POST", pattern) for pattern in families.POSTS}


class PdInstance:
    def __init__(
        self, role: str, options: PdOptions, plane: GenerationPlane, client: PeerClient
    ) -> None:
        self.role = role
        self.plane = plane
        self.dp = plane.dataplane
        self.options = options
        # the roles' modules load torch: imported only by an instance that takes a PD role
        self.prefill: PrefillRole | None = None
        self.decode: DecodeRole | None = None
        self.peers = KnownPeers(map(parse_peer, options.peer_allow))
        if self.role == "prefill":
            from rosettaserve.pd.prefill import PrefillRole

            self.prefill = PrefillRole(plane, options, self.peers, client)
        elif self.role == "decode":
            from rosettaserve.pd.decode import DecodeRole

            self.decode = DecodeRole(plane, options, self.peers, client)
        if self.role != "mixed" and not self.peers:
            log.warning(
                "--role %s without --peer-allow: no peer is known, every hand-over will be "
                "refused (403)",
                self.role,
            )

    def bound(self, host: str, port: int) -> None:
        """The address other instances reach this one at, once its port is known."""
        advertised = self.options.advertise_host or host
        if advertised in ("0.0.0.0", "::", ""):
            advertised = "127.0.0.1"
        if self.prefill is not None:
            self.prefill.address = Address(advertised, port)

    async def drain(self, grace: float) -> None:
        """On stop: let requests being decoded finish, then end the /dresult stream."""
        if self.decode is None:
            return
        loop = asyncio.get_running_loop()
        deadline = loop.time() + grace
        while self.decode.jobs and loop.time() < deadline:
            await asyncio.sleep(0.02)
        self.decode.hub.close()

    def wrap(self, llm_routes: list[Route]) -> list[Route]:
        """The LLM families' routes (served whole) as this role serves them."""
        return [self._wrap(r) if (r.method, r.pattern) in SPLIT else r for r in llm_routes]

    def _wrap(self, route: Route) -> Route:
        if self.prefill is None:
            return self._refuse_pd(route)
        _, endpoint = families.POSTS[route.pattern]
        return self.prefill.route(endpoint, route)

    def routes(self) -> list[Route]:
        """This role's own routes."""
        out: list[Route] = []
        if self.prefill is not None:
            out += self.prefill.routes()
        if self.decode is not None:
            out += self.decode.routes()
        else:
            out.append(Route("GET", "/dresult", self._no_dresult))
        return [*out, Route("GET", "/v1/status", self._status)]

    def _refuse_pd(self, route: Route) -> Route:
        role = self.role

        async def handler(req: HttpRequest) -> HttpResponse:
            if REQ_TYPE in req.headers:
                raise InvalidInput(
                    f"this instance's role is {role}, not prefill: it takes no requests with "
                    "the PD headers (req-type)"
                )
            return await route.handler(req)

        return Route(route.method, route.pattern, handler, route.on_error)

    async def _no_dresult(self, req: HttpRequest) -> HttpResponse:
        raise InvalidInput(f"only a decode instance serves /dresult; this one is {self.role}")

    async def _status(self, req: HttpRequest) -> HttpResponse:
        doc = self.status()
        if self.prefill is not None and self.prefill.from_peer(req):
            engines = [e for _, g in self.plane.generators() if (e := pd_engine(g))]
            if engines and all(e.kv is not None for e in engines):  # each cache can be read
                doc["prefill"][FIELD] = self.prefill.prefixes.report()
        return json_response(doc)

    def models(self) -> dict[str, dict[str, str]]:
        """Every LLM and embedding model's versions and their states (READY, LOADING, ...):
        the scheduler sends a request only where its model is READY."""
        registry = self.plane.registry
        found: dict[str, dict[str, str]] = {}
        for name in sorted(registry.model_names()):
            versions = [v for v in registry.versions(name) or [] if v.runtime in SERVED_RUNTIMES]
            if versions:
                found[name] = {v.version: v.state.value for v in versions}
        return found

    def status(self) -> dict[str, Any]:
        engines = [e for _, g in self.plane.generators() if (e := pd_engine(g))]
        running = sum(e.stats.running for e in engines)
        slots = sum(e.config.max_num_seqs for e in engines)
        kv = sum(e.stats.kv_tokens for e in engines)
        budget = sum(e.config.kv_budget_tokens for e in engines)
        doc: dict[str, Any] = {
            "service": {
                "roleStatus": "RoleReady" if self.dp.ready() else "RoleUnknown",
                "currentRole": self.role,
            },
            "resource": {
                "availSlotsNum": max(0, slots - running),
                "availBlockNum": max(0, budget - kv) if budget else None,
                "waitingRequestNum": sum(e.stats.waiting for e in engines),
                "runningRequestNum": running,
                "swappedRequestNum": 0,
                "kvTokensInUse": kv,
                "kvBudgetTokens": budget or None,
                "preempted": sum(e.stats.preempted for e in engines),
            },
            "models": self.models(),
        }
        if self.prefill is not None:
            leases = self.prefill.leases
            doc["prefill"] = {
                "leases": len(leases),
                "leaseBytes": leases.nbytes,
                "leaseBudget": leases.budget,
                "released": leases.released,
                "expired": leases.expired,
                "refused": leases.refused,
                "handovers": self.prefill.handovers,
            }
        if self.decode is not None:
            hub = self.decode.hub
            doc["decode"] = {
                "jobs": len(self.decode.jobs),
                "dresultConnected": hub.connected,
                "dresultConnections": hub.connections,
                "dresultRefused": hub.refused,
                **self.decode.stats,
            }
        return doc
