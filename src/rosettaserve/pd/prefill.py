"""The prefill instance: the first token here, the KV cache and the rest to a decode instance.

For each family route (POST) a request must carry the PD headers (wire.py; 400 when one is
missing or malformed, 503 while the instance is not ready). The family's own endpoint runs
once on the client's body, with a ``PrefillSplit`` as its explicit split argument: the engine
prefills, chooses the next token and the part ends there (parts.py). What the endpoint made of
that token in the family's framing is the reply's ``output``.
If the request ended there (one token, EOS, a stop) the reply says ``isLastResp: true``;
otherwise the cache goes under a lease (leases.py), the decode instance named by ``d-target``
is told to fetch it (``POST /v1/pd/decode``), and only once it agreed does the reply leave.
``d-target`` naming this very instance (the flex shortcut) serves the request whole, as a
mixed instance. Any other ``d-target`` must be a known peer (peers.py), else the request is
refused (403) before any work or connection; so is a ``req-id`` whose lease is still held
(409) and a request whose lease would not fit ``--kv-lease-budget`` (503). The lease and the
hand-over are bound to the request's job key (``pd-job-key``, made here when the scheduler
sent none): the decode instance fetches the cache with it, and nobody else can.

A ``pd-tenant`` header (the scheduler's client's key, wire.py) is taken from a peer only: when
this instance checks API keys, from a request carrying its own peer key (``--peer-api-key``,
the credential the scheduler and the instances share, which no client holds); without keys,
from whoever reaches its port (kept private, as every PD header is taken from it). The request
then queues under that tenant (``pd:<name>``, with its weight: core/share.py), and the decode
instance is told of it with the hand-over. A tenant from anyone else is ignored (logged once).
"""

from __future__ import annotations

import base64
import hmac
import logging
import secrets
from dataclasses import dataclass, field, replace
from typing import Any

import orjson

from rosettaserve.core.errors import InvalidInput, ModelNotReady, NotFound, ServingError
from rosettaserve.core.generate import DeltaStream, GenerateRequest, TextGenerator
from rosettaserve.core.generation_plane import GenerationPlane
from rosettaserve.core.pd_engine import Handoff, KvHandover, Resume
from rosettaserve.core.share import SHARE
from rosettaserve.core.status import ErrorKind
from rosettaserve.pd import wire
from rosettaserve.pd.http_client import Address, HttpClientError, PeerClient
from rosettaserve.pd.kv_transfer import encode
from rosettaserve.pd.leases import Leases, default_budget
from rosettaserve.pd.options import PdOptions
from rosettaserve.pd.parts import Part, engine_of
from rosettaserve.pd.peers import KnownPeers, UnknownPeer
from rosettaserve.pd.prefix_report import HeldPrefixes
from rosettaserve.pd.recompute import Recompute, restore
from rosettaserve.protocols.llm_http import Endpoint
from rosettaserve.security.keys import presented
from rosettaserve.web.routing import HttpRequest, HttpResponse, Route, json_response

log = logging.getLogger("rosettaserve.pd")
FAILED_HEADER = "x-pd-failed"  # set on a prefill error that the decode instance caused


class DecodeUnavailable(ServingError):
    """The decode instance named by ``d-target`` could not take the request over."""

    kind = ErrorKind.UNAVAILABLE


@dataclass
class PrefillSplit:
    """A prefill instance's part of one request (the plane's ``Split``): prefill, choose the
    next token, hold the cache for the handover; ``n`` > 1 is served whole here, and so is a
    constrained request on an engine without a cache to hand over."""

    recompute: Recompute | None
    identity: dict[str, Any] = field(default_factory=dict)
    handoff: Handoff = field(default_factory=Handoff)
    part: Part | None = None
    whole: bool = False  # served here from start to end (n > 1, as MindIE: no n with PD)
    kv: KvHandover | None = None  # the engine's hand-over (None: nothing to hand over)
    prompt_ids: list[int] = field(default_factory=list)
    sent: int = 0  # a recompute's output tokens the client already has
    prompt_tokens: int | None = None

    def start(self, generator: TextGenerator, request: GenerateRequest) -> DeltaStream:
        engine = engine_of(generator)
        if request.n != 1 or (engine.kv is None and request.sampling.constraint is not None):
            # n > 1, and structured outputs on an engine that recomputes on D (runtime: vllm,
            # whose grammar cannot start past P's token): served whole here, as one instance
            self.whole = True
            return generator.generate(request)
        r = self.recompute or Recompute(engine.prompt_ids(request), [])
        self.prompt_ids = r.prompt_ids
        self.prompt_tokens = 0 if self.recompute else len(r.prompt_ids)  # (once per request)
        kv = engine.kv
        if kv is None:  # no cache to hand over: the decode instance recomputes it
            stream = engine.resume(request, r.prompt_ids, r.prior, emit_prior=True)
            self.sent = 1 if r.prior else 0  # the prior tokens come as one delta
            self.part = Part(stream, stop_after=self.sent + 1)
            return self.part
        kv.check_ids(r.prompt_ids + r.prior)
        resume = Resume(
            prior=r.prior,
            seed=r.seed,
            sampler_state=r.sampler_state,
            emit_prior=True,
            handoff=self.handoff,
        )
        stream = kv.submit(request, r.prompt_ids, resume)
        self.kv = kv
        self.sent = len(r.prior)
        self.part = Part(stream, stop_after=len(r.prior) + 1)
        return self.part

    @property
    def last(self) -> bool:
        """The request ended here (served whole, or its last token came at once)."""
        return self.whole or (self.part is not None and self.part.done)


@dataclass(frozen=True)
class Handover:
    """Where a request goes on, and the job key that binds its lease and its decoding."""

    req_id: str
    target: Address
    key: str
    tenant: wire.Tenant | None = None  # the scheduler's tenant it queues under (None: none)


class PrefillRole:
    def __init__(
        self, plane: GenerationPlane, options: PdOptions, peers: KnownPeers, client: PeerClient
    ) -> None:
        self.plane = plane
        self.options = options
        self.peers = peers
        self.client = client
        self.leases = Leases(options.kv_lease_s, options.kv_lease_budget or default_budget())
        self.address = Address("127.0.0.1", 0)  # set once the port is bound
        self.handovers = 0
        self.prefixes = HeldPrefixes()  # the prompts prefilled here, for the status's report
        self.untrusted_tenant = False  # a tenant came from a request that is not a peer's

    def route(self, endpoint: Endpoint, route: Route) -> Route:
        """``route`` (the endpoint served whole) as this role serves it: with the PD headers."""

        async def handler(req: HttpRequest) -> HttpResponse:
            return await self.serve(endpoint, req)

        return Route(route.method, route.pattern, handler, route.on_error)

    async def serve(self, endpoint: Endpoint, req: HttpRequest) -> HttpResponse:
        pd = wire.parse_prefill_headers(req.headers)
        if not self.plane.dataplane.ready():
            raise ModelNotReady("this prefill instance is not ready (its role status is unknown)")
        tenant = pd.tenant if pd.tenant is not None and self._from_peer(req) else None
        if tenant is not None:  # the scheduler's client, in this instance's queues
            SHARE.set(tenant.share(SHARE.get().priority))
        if (pd.d_host, pd.d_port) == (self.address.host, self.address.port):
            return await endpoint.serve(self.plane, req, None)  # the flex shortcut: D is here
        target = await self._decode_instance(pd)
        self.leases.check(pd.req_id)
        body, recompute = restore(req.path, req.body) if pd.recompute else (req.body, None)
        split = PrefillSplit(recompute)
        response = await endpoint.serve(self.plane, replace(req, body=body), split)
        if response.status != 200 or not (split.part or split.whole):
            return response  # an error (forwarded unchanged), or nothing was generated
        output = await self._output(response, split)
        if split.kv is not None and split.prompt_ids:  # prefilled: in the engine's prefix cache
            self.prefixes.record(req.path, body, split.prompt_ids, split.kv.prefix_cache)
        if not split.last:
            key = pd.job_key or secrets.token_urlsafe(24)
            handover = Handover(pd.req_id, target, key, tenant)
            await self._hand_over(handover, req.path, body, split)
        is_stream = response.stream is not None
        return json_response(wire.prefill_reply(pd.req_id, is_stream, output, split.last))

    def from_peer(self, req: HttpRequest) -> bool:
        """Whether a request is a peer's: without API keys here (its key check names no
        tenant), yes (the port is kept private); with them, when it carries this instance's
        peer key."""
        if not SHARE.get().tenant:
            return True
        peer = self.client.api_key.encode()
        key = presented(req.headers.get("authorization"), req.headers.get("x-api-key"))
        sent = (key or "").encode("utf-8", "surrogatepass")
        return bool(peer) and hmac.compare_digest(peer, sent)

    def _from_peer(self, req: HttpRequest) -> bool:
        """Whether a request's ``pd-tenant`` is a peer's word (``from_peer``; not: logged once)."""
        if self.from_peer(req):
            return True
        if not self.untrusted_tenant:
            self.untrusted_tenant = True
            log.warning(
                "a '%s' header came with a key that is not this instance's --peer-api-key: "
                "ignored (so are the next ones; the request queues under its own key)",
                wire.TENANT,
            )
        return False

    async def _decode_instance(self, pd: wire.PrefillHeaders) -> Address:
        """``d-target``'s address, if it is a known peer: else 403, before anything is done
        (marked as the decode instance's failure: a scheduler tries another one)."""
        try:
            return await self.peers.admit(Address(pd.d_host, pd.d_port), "decode instance")
        except UnknownPeer as exc:
            log.warning("request %s refused: %s", pd.req_id, exc.message)
            exc.headers[FAILED_HEADER] = "decode"
            raise

    @staticmethod
    async def _output(response: HttpResponse, split: PrefillSplit) -> bytes:
        """What the client gets from this instance: the stream's chunks of this part, or the
        whole answer of a request that ended here."""
        if response.stream is None:
            return response.body if split.last else b""
        chunks = [chunk async for chunk in response.stream]
        if split.part is not None and split.part.failure is not None:
            raise split.part.failure  # an error reply, not an error chunk after the first token
        return b"".join(chunks)

    async def _hand_over(
        self, h: Handover, path: str, body: bytes | bytearray, call: PrefillSplit
    ) -> None:
        assert call.part is not None
        payload = b""  # an engine that hands no cache over: the decode instance recomputes it
        if call.kv is not None:
            kv = call.handoff.kv
            if kv is None:
                raise InvalidInput("the request ended before its cache could be handed over")
            payload = encode(kv, h.req_id, call.kv.kv_geometry())
            if len(payload) > self.options.max_kv_bytes:
                raise InvalidInput(f"the KV cache ({len(payload)} bytes) is over --max-kv-bytes")
        self.leases.put(h.req_id, payload, h.key)  # (empty: D confirms the hand-over with it)
        params = self._decode_params(h, path, body, call, len(payload))
        try:
            status, _, reply = await self.client.fetch(
                h.target,
                "POST",
                "/v1/pd/decode",
                headers={"content-type": "application/json"},
                body=orjson.dumps(params),
                timeout=self.options.peer_timeout_s,
            )
        except HttpClientError as exc:
            self.leases.drop(h.req_id, h.key)
            raise _unavailable(f"decode instance {h.target} cannot be reached: {exc}") from None
        if status != 200:
            self.leases.drop(h.req_id, h.key)
            text = reply[:300].decode("utf-8", "replace")
            raise _unavailable(f"decode instance {h.target} refused the request ({status}): {text}")
        self.handovers += 1

    def _decode_params(
        self,
        h: Handover,
        path: str,
        body: bytes | bytearray,
        call: PrefillSplit,
        size: int,
    ) -> dict[str, Any]:
        assert call.part is not None
        state = call.handoff.sampler_state
        prior = sum(len(d.token_ids) for d in call.part.seen)
        return {
            "reqId": h.req_id,
            "jobKey": h.key,
            "pNodeAddr": f"{self.address.host};{self.address.port}",
            "path": path,
            "body": body.decode("utf-8"),
            "promptIds": call.prompt_ids,
            "deltas": [wire.delta_doc(d) for d in call.part.seen],
            "seed": call.handoff.seed,
            "samplerState": base64.b64encode(state).decode() if state else None,
            "kvTokens": len(call.prompt_ids) + prior - 1,
            "kvBytes": size,
            "identity": call.identity or None,
            "priority": SHARE.get().priority,  # the X-Priority header's too: D admits by it
            **({"tenant": h.tenant.name, "weight": h.tenant.weight} if h.tenant else {}),
        }

    # -- the KV caches held for decode instances -------------------------------------------------

    def routes(self) -> list[Route]:
        async def get_kv(req: HttpRequest) -> HttpResponse:
            """The fetch, which ends the lease; only with the job key the lease was made for."""
            req_id = req.params["req_id"]
            payload = self.leases.take(req_id, req.headers.get(wire.JOB_KEY, ""))
            if payload is None:
                raise NotFound(f"no KV cache is held for request {req_id}")
            return HttpResponse(200, payload, "application/octet-stream")

        async def release_kv(req: HttpRequest) -> HttpResponse:
            key = req.headers.get(wire.JOB_KEY, "")
            return json_response({"released": self.leases.release(req.params["req_id"], key)})

        path = r"/v1/pd/kv/(?P<req_id>[0-9a-fA-F]{1,1024})"
        return [Route("GET", path, get_kv), Route("DELETE", path, release_kv)]


def _unavailable(message: str) -> DecodeUnavailable:
    log.warning("%s", message)
    return DecodeUnavailable(message, headers={FAILED_HEADER: "decode"})
