"""The decode instance: takes requests over from prefill instances, streams them on /dresult.

``POST /v1/pd/decode`` (from a prefill instance; JSON, see ``DecodeParams``) is checked and
answered at once (``{"isValidDecodeParameters", "errorMessage"}``, as MindIE's D answers P):
its ``pNodeAddr`` must be a known peer (peers.py; else 403, and nothing is contacted). Then a
job fetches the cache from that prefill instance (``GET /v1/pd/kv/{reqId}`` with the job key,
which ends P's lease) — the fetch is also P's word that it handed this request over with
this key: a job P does not confirm (403, or 404: no such lease) ends without a frame, so a
hand-over forged under another request's id never speaks for it — and runs the family's
endpoint once on the client's body with a ``DecodeSplit``:
its part starts with the prefill instance's deltas (the family's framer takes them as state,
the client has them) and decodes on in the continuous batch. Every chunk goes out on
``/dresult`` as ``data:``, the last one as ``lastData:`` (a
non-streaming request: its whole JSON answer); a failure as ``error:<message>``; a sequence
the KV budget preempted (or a full engine) as ``retry:<recompute body>``.

The job queues in the engine under the request's priority and, when the prefill instance
sends one, its scheduler's tenant (``tenant``, ``weight``: wire.Tenant, as P queued it) rather
than under the prefill instance's key; a hand-over P does not confirm is never queued at all.

A job is bound to its job key (``jobKey``, the secret the scheduler, P and D share): only a
``DELETE /v1/pd/decode/{reqId}`` that carries it (``pd-job-key``) cancels the job, and an id
being decoded is not taken again (409). ``GET /v1/status`` counts the jobs, never names them.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hmac
import logging
from dataclasses import dataclass, field
from typing import Any

import orjson

from rosettaserve.core import share
from rosettaserve.core.errors import Forbidden, InvalidInput, NotFound, Overloaded, ServingError
from rosettaserve.core.generate import (
    DeltaStream,
    Fields,
    GenerateDelta,
    GenerateRequest,
    TextGenerator,
    json_object,
)
from rosettaserve.core.generation_plane import GenerationPlane
from rosettaserve.core.pd_engine import PdEngine, Preempted, Resume
from rosettaserve.core.status import ErrorKind
from rosettaserve.pd import wire
from rosettaserve.pd.dresult import DResultHub
from rosettaserve.pd.http_client import Address, HttpClientError, PeerClient
from rosettaserve.pd.kv_transfer import KvError, decode
from rosettaserve.pd.options import PdOptions
from rosettaserve.pd.parts import Part, engine_of
from rosettaserve.pd.peers import KnownPeers
from rosettaserve.pd.recompute import retry_body
from rosettaserve.protocols import families
from rosettaserve.protocols.llm_http import Endpoint
from rosettaserve.security.keys import MAX_WEIGHT
from rosettaserve.web.routing import HttpRequest, HttpResponse, Route, json_response

log = logging.getLogger("rosettaserve.pd")
SEED_RANGE_END = 2**64 - 1  # a generator's seed (a request's seed plus its choice's index)
ANSWER_BYTES = 64 * 1024  # the most a KV fetch's answer may hold beyond the cache it expects


class Conflict(ServingError):
    kind = ErrorKind.ALREADY_EXISTS


class NoReader(ServingError):
    kind = ErrorKind.UNAVAILABLE


class Unconfirmed(Exception):
    """The prefill instance named in a hand-over did not hand this request over with this key."""


@dataclass
class DecodeParams:
    req_id: str
    job_key: str
    p_addr: Address
    path: str
    body: bytes
    prompt_ids: list[int]
    deltas: list[GenerateDelta]
    seed: int
    sampler_state: bytes | None
    kv_tokens: int
    kv_bytes: int
    identity: dict[str, Any] = field(default_factory=dict)
    priority: int = 0  # the request's at the prefill instance (core/share.py): its X-Priority too
    tenant: wire.Tenant | None = None  # the scheduler's tenant, as P queued it (None: none)

    @property
    def prior(self) -> list[int]:
        return [t for d in self.deltas for t in d.token_ids]


_REQUIRED = ("reqId", "jobKey", "pNodeAddr", "path", "body", "promptIds", "deltas", "seed",
             "kvTokens", "kvBytes")  # fmt: skip


def parse_decode_params(body: bytes | bytearray, limit: int) -> DecodeParams:
    """The parameters a prefill instance sends (``PrefillRole._decode_params``); InvalidInput
    (400) names the field that is missing or wrong."""
    fields = Fields(json_object(body))
    missing = [key for key in _REQUIRED if not fields.has(key)]
    if missing:
        names = ", ".join(f"'{key}'" for key in missing)
        raise InvalidInput(f"malformed decode parameters: {names} missing")
    try:
        return _params(fields, limit)
    except (InvalidInput, ValueError) as exc:
        text = exc.message if isinstance(exc, InvalidInput) else str(exc)
        raise InvalidInput(f"malformed decode parameters: {text}") from None


def _params(f: Fields, limit: int) -> DecodeParams:
    doc = f.doc
    req_id = doc["reqId"]
    if type(req_id) is int:
        req_id = str(req_id)
    if not isinstance(req_id, str) or not (req_id.isascii() and req_id.isalnum()):
        raise ValueError(f"'reqId' must be a string of letters and digits, got {req_id!r:.40}")
    key = doc["jobKey"]
    if not isinstance(key, str) or not wire.valid_job_key(key):
        raise ValueError("'jobKey' must be 16 to 128 letters, digits, '-' or '_'")
    prompt = list(f.token_ids("promptIds"))
    if not prompt:
        raise ValueError("'promptIds' must not be empty")
    size = _integer(f, "kvBytes", 0)  # 0: no cache, recomputed here (runtime: vllm)
    if size > limit:
        raise ValueError(f"'kvBytes' must be in [0, {limit}] (--max-kv-bytes), got {size}")
    return DecodeParams(
        req_id,
        key,
        _p_node(doc["pNodeAddr"]),
        _string(f, "path"),
        _string(f, "body").encode(),
        prompt,
        _deltas(doc["deltas"]),
        _integer(f, "seed", 0, SEED_RANGE_END),
        _sampler_state(f.string("samplerState")),
        _integer(f, "kvTokens", 0),
        size,
        dict(f.object("identity").doc),
        f.integer("priority", 0, share.MIN_PRIORITY, share.MAX_PRIORITY) or 0,
        _tenant(f),
    )


def _tenant(f: Fields) -> wire.Tenant | None:
    """The scheduler's tenant (``tenant``, ``weight``), as P checked it (wire.tenant)."""
    name = f.string("tenant")
    if name is None:
        return None
    weight = f.number("weight", 1.0, 0.0, MAX_WEIGHT, lo_open=True) or 1.0
    return wire.tenant(name, weight, "'tenant'")


def _string(f: Fields, key: str) -> str:
    value = f.string(key)
    if value is None:
        raise ValueError(f"'{key}' is missing")
    return value


def _integer(f: Fields, key: str, lo: int, hi: int | None = None) -> int:
    value = f.integer(key, None, lo, hi)
    if value is None:
        raise ValueError(f"'{key}' is missing")
    return value


def _p_node(value: Any) -> Address:
    host, _, port = value.partition(";") if isinstance(value, str) else ("", "", "")
    if not host or not (port.isascii() and port.isdigit()) or not 0 < int(port) < 65536:
        raise ValueError(f"'pNodeAddr' must be '<host>;<port>', got {value!r:.80}")
    return Address(host, int(port))


def _deltas(value: Any) -> list[GenerateDelta]:
    if not isinstance(value, list) or not value:
        raise ValueError("'deltas' must be a non-empty list of deltas")
    deltas = []
    for i, doc in enumerate(value):
        try:
            deltas.append(wire.delta_from_doc(doc))
        except ValueError as exc:
            raise ValueError(f"'deltas[{i}]': {exc}") from None
    return deltas


def _sampler_state(value: str | None) -> bytes | None:
    if not value:
        return None
    try:
        return base64.b64decode(value, validate=True)
    except binascii.Error:
        raise ValueError("'samplerState' must be base64") from None


@dataclass
class DecodeSplit:
    """A decode instance's part of one request (the plane's ``Split``): the prefill instance's
    deltas, then decoding from its shipped cache."""

    params: DecodeParams
    payload: bytes
    limit: int
    part: Part | None = None
    refused: ServingError | None = None  # the engine was full: the request goes back (retry)
    prompt_tokens: int | None = 0  # counted by the prefill instance

    def __post_init__(self) -> None:
        self.identity: dict[str, Any] = dict(self.params.identity)

    @property
    def sent(self) -> int:
        return len(self.params.deltas)

    @property
    def failure(self) -> ServingError | None:
        return self.part.failure if self.part is not None else self.refused

    @property
    def done(self) -> bool:
        return self.part is not None and self.part.done

    def start(self, generator: TextGenerator, request: GenerateRequest) -> DeltaStream:
        p = self.params
        if request.n != 1:
            raise InvalidInput("a request with n > 1 is not split between instances")
        engine = engine_of(generator)
        if p.kv_tokens != len(p.prompt_ids) + len(p.prior) - 1:
            raise InvalidInput("the KV cache length does not match the prompt and output")
        if not self.payload:  # no cache came: recompute the prompt's and the prior tokens'
            return self._recompute(engine, request)
        port = engine.kv
        if port is None:
            raise InvalidInput("this instance's engine takes no KV cache from elsewhere")
        try:
            kv = decode(self.payload, port.kv_geometry(), p.kv_tokens, self.limit)
        except KvError as exc:
            raise InvalidInput(f"the KV cache from {p.p_addr} was refused: {exc}") from None
        resume = Resume(p.prior, port.kv_to_device(kv), p.seed, p.sampler_state, preemptible=True)
        try:
            stream = port.submit(request, p.prompt_ids, resume)
        except Overloaded as exc:
            self.refused = exc
            raise
        self.part = Part(stream, p.deltas)
        return self.part

    def _recompute(self, engine: PdEngine, request: GenerateRequest) -> DeltaStream:
        p = self.params
        stream: DeltaStream
        try:
            if engine.kv is not None:  # its own sampler state goes on from the prefill's
                resume = Resume(p.prior, None, p.seed, p.sampler_state, preemptible=True)
                stream = engine.kv.submit(request, p.prompt_ids, resume)
            else:
                stream = engine.resume(request, p.prompt_ids, p.prior, emit_prior=False)
        except Overloaded as exc:
            self.refused = exc
            raise
        self.part = Part(stream, p.deltas)
        return self.part


@dataclass
class Job:
    """A request being decoded here, and the key it was handed over with."""

    task: asyncio.Task[None]
    key: str

    def owned_by(self, key: str) -> bool:
        return hmac.compare_digest(self.key.encode(), key.encode())


class DecodeRole:
    def __init__(
        self,
        plane: GenerationPlane,
        options: PdOptions,
        peers: KnownPeers,
        client: PeerClient,
    ) -> None:
        self.plane = plane
        self.client = client
        self.options = options
        self.peers = peers
        self.hub = DResultHub(options.heartbeat_s, self.cancel_all)
        self.jobs: dict[str, Job] = {}
        self.stats = {"accepted": 0, "finished": 0, "retried": 0, "failed": 0, "cancelled": 0,
                      "unconfirmed": 0}  # fmt: skip

    def routes(self) -> list[Route]:
        async def accept(req: HttpRequest) -> HttpResponse:
            params = parse_decode_params(req.body, self.options.max_kv_bytes)
            params.p_addr = await self.peers.admit(params.p_addr, "prefill instance")
            return self.accept(params)

        async def cancel(req: HttpRequest) -> HttpResponse:
            req_id = req.params["req_id"]
            job = self.jobs.get(req_id)
            if job is None or not job.owned_by(req.headers.get(wire.JOB_KEY, "")):
                raise Forbidden(f"no request {req_id} with this job key is being decoded here")
            job.task.cancel()
            return json_response({"cancelled": True})

        async def dresult(req: HttpRequest) -> HttpResponse:
            headers = {"cache-control": "no-cache"}
            return HttpResponse(200, content_type="text/event-stream", headers=headers,
                                stream=self.hub.open())  # fmt: skip

        return [
            Route("POST", "/v1/pd/decode", accept, refusal),
            Route("DELETE", r"/v1/pd/decode/(?P<req_id>[0-9a-zA-Z]{1,1024})", cancel),
            Route("GET", "/dresult", dresult),
        ]

    def accept(self, p: DecodeParams) -> HttpResponse:
        if not self.hub.connected:
            raise NoReader("no scheduler is reading /dresult on this decode instance")
        if p.req_id in self.jobs:
            raise Conflict(f"request {p.req_id} is already being decoded here")
        found = families.endpoint_of(p.path)
        if found is None:
            raise InvalidInput(f"{p.path} is not a generation route of this instance")
        _, endpoint, params = found
        headers = {"content-type": "application/json"}
        request = HttpRequest("POST", p.path, b"", headers, p.body, params=params)
        task = asyncio.create_task(self._job(p, endpoint, request))
        self.jobs[p.req_id] = Job(task, p.job_key)
        self.stats["accepted"] += 1
        return json_response({"isValidDecodeParameters": True, "errorMessage": ""})

    def cancel_all(self) -> None:
        """The scheduler went away: nobody will read these requests' frames."""
        for job in list(self.jobs.values()):
            job.task.cancel()

    async def _job(self, p: DecodeParams, endpoint: Endpoint, request: HttpRequest) -> None:
        split: DecodeSplit | None = None
        # (this job's own context) its place in the engine's waiting queue
        if p.tenant is not None:
            share.SHARE.set(p.tenant.share(p.priority))
        elif p.priority:
            share.prioritise(p.priority)
        try:
            payload = await self._fetch_kv(p)
            split = DecodeSplit(p, payload, self.options.max_kv_bytes)
            response = await endpoint.serve(self.plane, request, split)
            await self._relay(p, response, split)
        except Unconfirmed as exc:  # not a hand-over: nothing of it goes on /dresult
            log.warning("request %s dropped: %s", p.req_id, exc)
            self.stats["unconfirmed"] += 1
        except ServingError as exc:
            self._interrupted(p, exc)
        except (HttpClientError, KvError) as exc:
            self._fail(p, f"the KV cache could not be fetched from {p.p_addr}: {exc}")
        except asyncio.CancelledError:
            self.stats["cancelled"] += 1
        except Exception as exc:
            log.exception("decoding request %s failed", p.req_id)
            self._fail(p, f"internal error on the decode instance: {type(exc).__name__}: {exc}")
        finally:
            self.jobs.pop(p.req_id, None)

    async def _fetch_kv(self, p: DecodeParams) -> bytes:
        """The cache (empty: none was shipped), which P frees as it sends it; P's answer is also
        its word that it handed this request over with this key."""
        path = f"/v1/pd/kv/{p.req_id}"
        headers, timeout = {wire.JOB_KEY: p.job_key}, self.options.peer_timeout_s
        limit = max(p.kv_bytes, ANSWER_BYTES)  # (room for an error answer)
        status, _, payload = await self.client.fetch(
            p.p_addr, "GET", path, headers=headers, timeout=timeout, limit=limit
        )
        if status in (Forbidden.kind.http, NotFound.kind.http):
            raise Unconfirmed(f"{p.p_addr} did not hand request {p.req_id} over with this key")
        if status != 200:
            raise KvError(f"GET {path} answered {status}: {payload[:200]!r}")
        if len(payload) != p.kv_bytes:
            raise KvError(f"GET {path} sent {len(payload)} bytes, not {p.kv_bytes}")
        return payload

    async def _relay(self, p: DecodeParams, response: HttpResponse, split: DecodeSplit) -> None:
        if response.status != 200:  # a family that renders its errors itself (vLLM's)
            failure = split.failure
            if failure is None and response.status == Overloaded.kind.http:
                failure = Overloaded(_message(response.body))  # full here: recompute elsewhere
            if failure is not None:
                self._interrupted(p, failure)
            else:
                self._fail(p, _message(response.body))
            return
        if response.stream is None:
            self._send(p, wire.LAST, response.body)
            self.stats["finished"] += 1
            return
        held: bytes | None = None
        async for chunk in response.stream:
            if split.failure is not None:  # the chunk is the family's error chunk: not sent
                self._interrupted(p, split.failure)
                return
            if not split.done:
                self._send(p, wire.DATA, chunk)
                continue
            if held is not None:
                self._send(p, wire.DATA, held)
            held = chunk
        self._send(p, wire.LAST, held or b"")
        self.stats["finished"] += 1

    def _interrupted(self, p: DecodeParams, failure: ServingError) -> None:
        """A failure: a preempted sequence or a full engine goes back to the scheduler to be
        recomputed elsewhere (``retry:``); anything else is an ``error:`` frame."""
        if isinstance(failure, Preempted):
            sampler = (failure.seed, failure.sampler_state) if failure.sampler_state else None
            body = retry_body(p.path, p.body, failure.prompt_ids, failure.output_ids, sampler)
        elif isinstance(failure, Overloaded):
            sampler = (p.seed, p.sampler_state) if p.sampler_state else None
            body = retry_body(p.path, p.body, p.prompt_ids, p.prior, sampler)
        else:
            self._fail(p, failure.message)
            return
        self.stats["retried"] += 1
        self._send(p, wire.RETRY, body)

    def _fail(self, p: DecodeParams, message: str) -> None:
        self.stats["failed"] += 1
        self._send(p, wire.ERROR, message.encode())

    def _send(self, p: DecodeParams, kind: str, body: bytes) -> None:
        # with no reader the frame is lost; the hub's on_lost cancels the jobs meanwhile
        self.hub.send(wire.frame(p.req_id, kind, body))


def refusal(exc: ServingError) -> HttpResponse:
    doc = {"isValidDecodeParameters": False, "errorMessage": exc.message}
    return json_response(doc, exc.http_status, exc.headers)


def _message(body: bytes) -> str:
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError:
        return body[:500].decode("utf-8", "replace")
    found = doc.get("error") if isinstance(doc, dict) else None
    if isinstance(found, dict):
        found = found.get("message")
    return str(found) if found else body[:500].decode("utf-8", "replace")
