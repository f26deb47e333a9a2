"""The decode instance: takes requests over from prefill instances, streams them on /dresult.

``POST /v1/pd/decode`` (from a prefill instance; JSON, see ``DecodeParams``) is checked and
answered at once (``{"isValidDecodeParameters", "errorMessage"}``, as MindIE's D answers P);
then a job fetches the cache from the prefill instance (``GET /v1/pd/kv/{reqId}``), acks it
(``DELETE``), and runs the family's handler on the client's body with a hooked generator that
replays the prefill instance's deltas and decodes on in the continuous batch. Every chunk the
client has not seen goes out on ``/dresult`` as ``data:``, the last one as ``lastData:`` (a
non-streaming request: its whole JSON answer); a failure as ``error:<message>``; a sequence
the KV budget preempted (or a full engine) as ``retry:<recompute body>``.
"""

from __future__ import annotations

import asyncio
import base64
import logging
from dataclasses import dataclass, field
from typing import Any

import orjson

from rosettaserve.core.errors import InvalidInput, Overloaded, ServingError
from rosettaserve.core.generate import (
    DeltaStream,
    GenerateDelta,
    GenerateRequest,
    TextGenerator,
    json_object,
)
from rosettaserve.core.status import ErrorKind
from rosettaserve.pd import wire
from rosettaserve.pd.dresult import DResultHub
from rosettaserve.pd.hooks import Interrupted, SplitStream, engine_of, geometry_of, hooked
from rosettaserve.pd.http_client import Address, HttpClientError, fetch
from rosettaserve.pd.kv_transfer import KvError, decode
from rosettaserve.pd.recompute import retry_body
from rosettaserve.runtimes.llm.resume import Preempted, Resume
from rosettaserve.settings import PdOptions
from rosettaserve.transport.routing import HttpRequest, HttpResponse, Route, Router, json_response

log = logging.getLogger("rosettaserve.pd")


class Conflict(ServingError):
    kind = ErrorKind.ALREADY_EXISTS


class NoReader(ServingError):
    kind = ErrorKind.UNAVAILABLE


@dataclass
class DecodeParams:
    req_id: str
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

    @property
    def prior(self) -> list[int]:
        return [t for d in self.deltas for t in d.token_ids]


def parse_decode_params(body: bytes | bytearray, limit: int) -> DecodeParams:
    doc = json_object(body)
    try:
        return _params(doc, limit)
    except (KeyError, TypeError, ValueError) as exc:
        raise InvalidInput(f"malformed decode parameters: {exc}") from None


def _params(doc: dict[str, Any], limit: int) -> DecodeParams:
    req_id, path, text = str(doc["reqId"]), doc["path"], doc["body"]
    if not req_id or not req_id.isalnum() or not isinstance(path, str) or not isinstance(text, str):
        raise ValueError("'reqId', 'path' and 'body' must be strings")
    host, _, port = str(doc["pNodeAddr"]).partition(";")
    prompt, deltas = doc["promptIds"], [wire.delta_from_doc(d) for d in doc["deltas"]]
    if not wire._ints(prompt) or not prompt or not deltas:
        raise ValueError("'promptIds' and 'deltas' must be non-empty")
    size, tokens, seed = int(doc["kvBytes"]), int(doc["kvTokens"]), int(doc["seed"])
    if not 0 < size <= limit:
        raise ValueError(f"'kvBytes' must be in [1, {limit}] (--max-kv-bytes)")
    state = doc.get("samplerState")
    identity = doc.get("identity") or {}
    if not isinstance(identity, dict):
        raise ValueError("'identity' must be an object")
    return DecodeParams(
        req_id,
        Address(host, int(port)),
        path,
        text.encode(),
        prompt,
        deltas,
        seed,
        base64.b64decode(state, validate=True) if state else None,
        tokens,
        size,
        identity,
    )


@dataclass
class DecodeCall:
    """One request's decoding: the hooked generator's side."""

    params: DecodeParams
    payload: bytes
    limit: int
    split: SplitStream | None = None
    refused: ServingError | None = None  # the engine was full: the request goes back (retry)

    def generate(self, inner: TextGenerator, request: GenerateRequest) -> DeltaStream:
        p = self.params
        if request.n != 1:
            raise InvalidInput("a request with n > 1 is not split between instances")
        engine = engine_of(inner)
        if p.kv_tokens != len(p.prompt_ids) + len(p.prior) - 1:
            raise InvalidInput("the KV cache length does not match the prompt and output")
        try:
            kv = decode(self.payload, geometry_of(engine), p.kv_tokens, self.limit)
        except KvError as exc:
            raise InvalidInput(f"the KV cache from {p.p_addr} was refused: {exc}") from None
        device = engine.runner.device
        kv = [(k.to(device), v.to(device)) for k, v in kv]
        resume = Resume(p.prior, kv, p.seed, p.sampler_state, preemptible=True)
        try:
            stream = engine.submit(request, p.prompt_ids, resume)
        except Overloaded as exc:
            self.refused = exc
            raise Interrupted(exc.message) from exc
        self.split = SplitStream(stream, p.deltas, replayed=len(p.deltas))
        return self.split


class DecodeRole:
    def __init__(self, router: Router, options: PdOptions) -> None:
        self.router = router  # the family routes, to run a handler by path
        self.options = options
        self.hub = DResultHub(options.heartbeat_s, self.cancel_all)
        self.jobs: dict[str, asyncio.Task[None]] = {}
        self.stats = {"accepted": 0, "finished": 0, "retried": 0, "failed": 0, "cancelled": 0}

    def routes(self) -> list[Route]:
        async def accept(req: HttpRequest) -> HttpResponse:
            return self.accept(parse_decode_params(req.body, self.options.max_kv_bytes))

        async def cancel(req: HttpRequest) -> HttpResponse:
            task = self.jobs.get(req.params["req_id"])
            if task is not None:
                task.cancel()
            return json_response({"cancelled": task is not None})

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
        try:
            route, match = self.router.match("POST", p.path)
        except ServingError:
            raise InvalidInput(f"{p.path} is not a generation route of this instance") from None
        headers = {"content-type": "application/json"}
        request = HttpRequest("POST", p.path, b"", headers, p.body, params=match)
        self.jobs[p.req_id] = asyncio.create_task(self._job(p, route, request))
        self.stats["accepted"] += 1
        return json_response({"isValidDecodeParameters": True, "errorMessage": ""})

    def cancel_all(self) -> None:
        """The scheduler went away: nobody will read these requests' frames."""
        for task in list(self.jobs.values()):
            task.cancel()

    async def _job(self, p: DecodeParams, route: Route, request: HttpRequest) -> None:
        call: DecodeCall | None = None
        try:
            call = DecodeCall(p, await self._fetch_kv(p), self.options.max_kv_bytes)
            with hooked(call.generate, dict(p.identity)):
                response = await route.handler(request)
            await self._relay(p, response, call)
            self.stats["finished"] += 1
        except Interrupted:
            self._interrupted(p, call)
        except ServingError as exc:
            self._fail(p, exc.message)
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
        path = f"/v1/pd/kv/{p.req_id}"
        timeout = self.options.peer_timeout_s
        status, _, payload = await fetch(p.p_addr, "GET", path, timeout=timeout, limit=p.kv_bytes)
        if status != 200:
            raise KvError(f"GET {path} answered {status}: {payload[:200]!r}")
        try:  # the ack: the prefill instance frees its copy
            await fetch(p.p_addr, "DELETE", path, timeout=timeout)
        except HttpClientError as exc:
            log.warning("could not release the KV cache of %s on %s: %s", p.req_id, p.p_addr, exc)
        return payload

    async def _relay(self, p: DecodeParams, response: HttpResponse, call: DecodeCall) -> None:
        if response.status != 200:
            self._fail(p, _message(response.body))
            return
        if response.stream is None:
            self._send(p, wire.LAST, response.body)
            return
        held: bytes | None = None
        async for chunk in response.stream:
            if call.split is None or not call.split.keep:
                continue
            if not call.split.done:
                self._send(p, wire.DATA, chunk)
                continue
            if held is not None:
                self._send(p, wire.DATA, held)
            held = chunk
        self._send(p, wire.LAST, held or b"")

    def _interrupted(self, p: DecodeParams, call: DecodeCall | None) -> None:
        failure: ServingError | None = None
        if call is not None:
            failure = call.split.failure if call.split is not None else call.refused
        if isinstance(failure, Preempted):
            sampler = (failure.seed, failure.sampler_state) if failure.sampler_state else None
            body = retry_body(p.path, p.body, failure.prompt_ids, failure.output_ids, sampler)
        elif isinstance(failure, Overloaded):
            sampler = (p.seed, p.sampler_state) if p.sampler_state else None
            body = retry_body(p.path, p.body, p.prompt_ids, p.prior, sampler)
        else:
            self._fail(p, failure.message if failure else "the request was interrupted")
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
