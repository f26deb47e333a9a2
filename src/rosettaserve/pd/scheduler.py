"""The scheduler (coordinator): the LLM families in, prefill and decode instances behind.

Per request: a fresh decimal ``req-id``; a prefill instance P and a decode instance D chosen
(pool.py); the client's URL and body forwarded unchanged to P with the PD headers. P answers
with the first token already in the family's framing (``output``), or with the whole answer
(``isLastResp``), or, for a non-streaming request going on at D, with nothing yet. Frames from
D (``/dresult``, read by the pool) are queued per ``reqId`` from the moment the request is
sent to P, so they wait until P's output has gone to the client. ``retry:`` sends the rebuilt
body to a prefill instance again with ``is-recompute: true`` (at most ``max_retry`` times).

Failures reach the client in its family's own form: before any output, as the family's error
reply (P's own error replies are forwarded unchanged); after, as the family's error chunk. A
prefill instance that cannot be reached is marked down and the next one is tried; so is a
decode instance a prefill instance could not hand over to. A decode instance whose /dresult
stream breaks fails its requests at once (503 and ``Retry-After``). While no prefill or no
decode instance has the request's model READY, the request is refused at once with 503 and
``Retry-After`` (as a loading MindIE or vLLM instance answers), in the family's error form.

The routes a family serves whole (``count_tokens``, ...) and the embedding and rerank routes
(protocols/pooling.py) are not split: each request goes whole to one instance of either role
that has its model READY, its reply forwarded unchanged. The Responses API's store is kept
here, not on the instances (responses_kept.py): ``GET`` / ``DELETE /v1/responses/{id}`` are
answered by the scheduler.

Header fields between the client and P: forwarding.py; with API keys, the client's key's
tenant goes to P as ``pd-tenant`` (wire.py), so the instances share themselves between the
scheduler's keys by their weights (core/share.py). A frame on ``/dresult`` is taken only
from the decode instance its request was assigned to; any other D's is dropped and logged.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections import Counter
from collections.abc import AsyncIterator
from functools import cached_property
from typing import Any
from urllib.parse import quote

from rosettaserve.core.errors import DeadlineExceeded, ModelError, ServingError
from rosettaserve.core.queue_limit import RETRY_AFTER_S
from rosettaserve.core.share import SHARE
from rosettaserve.core.status import BY_HTTP, ErrorKind
from rosettaserve.core.timeouts import within
from rosettaserve.pd import forwarding, wire
from rosettaserve.pd.http_client import HttpClientError, PeerClient
from rosettaserve.pd.options import SchedulerOptions
from rosettaserve.pd.pool import Instance, Pool, Wanted, model_of
from rosettaserve.pd.prefill import FAILED_HEADER
from rosettaserve.pd.prefix_affinity import prompt_blocks
from rosettaserve.pd.responses_kept import Kept
from rosettaserve.protocols import pooling
from rosettaserve.protocols.families import FAMILIES, POSTS, Family, family_of
from rosettaserve.protocols.openai import responses
from rosettaserve.protocols.openai.responses_store import deleted, retrieved
from rosettaserve.web.routing import HttpRequest, HttpResponse, Route, json_response

log = logging.getLogger("rosettaserve.pd.scheduler")
ID_HEADER = "x-pd-req-id"


class Unavailable(ServingError):
    """No instance can take the request now: 503, with when to try again."""

    kind = ErrorKind.UNAVAILABLE

    def __init__(self, message: str) -> None:
        super().__init__(message, headers={"retry-after": RETRY_AFTER_S})


class Upstream(ServingError):
    """A prefill instance's error reply, as an error of the same status."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.kind = BY_HTTP.get(status, ErrorKind.INTERNAL)


Item = wire.Frame | ServingError


class Pending:
    """One request between its dispatch and its last frame."""

    def __init__(self, req_id: str, family: Family, req: HttpRequest) -> None:
        self.req_id, self.family, self.req = req_id, family, req
        self.key = secrets.token_urlsafe(24)  # its job key: only P, D and we know it
        self.queue: asyncio.Queue[Item] = asyncio.Queue()
        self.decode: Instance | None = None
        self.retries = 0
        self.first = b""
        self.foreign = 0  # frames for it from a decode instance it was not assigned to
        self.tenant = wire.tenant_header(SHARE.get())  # its client's key's tenant ({}: no keys)

    @cached_property
    def wanted(self) -> Wanted:
        """The model the request names (read from it once, when the pool needs it)."""
        return model_of(self.req)

    @cached_property
    def blocks(self) -> list[bytes]:
        """The prompt's chained block hashes (read once, when the prefix policy needs them)."""
        return prompt_blocks(self.req.path, self.req.body)

    @property
    def headers(self) -> dict[str, str]:
        """On the reply: the req-id the instances saw (for logs and tests)."""
        return {ID_HEADER: self.req_id}

    def assign(self, d: Instance | None) -> None:
        if self.decode is not None:
            self.decode.active -= 1
        self.decode = d
        if d is not None:
            d.active += 1


class Scheduler:
    def __init__(self, options: SchedulerOptions, client: PeerClient) -> None:
        self.options = options
        self.client = client
        self.pool = Pool(
            list(options.prefill),
            list(options.decode),
            options.policy,
            on_frame=self._on_frame,
            on_lost=self._on_lost,
            client=client,
            poll_s=options.poll_s,
            discovery_s=options.discovery_s,
        )
        self.pending: dict[str, Pending] = {}
        self.kept = Kept(options.responses_store)
        self.stats: Counter[str] = Counter()
        self._background: set[asyncio.Task[None]] = set()

    def new_id(self) -> str:
        """A random 63-bit decimal id, unused here: no party can guess the next request's id
        (to take its lease or its decode job first), and ids stay unique across restarts."""
        while (req_id := str(secrets.randbits(63))) in self.pending:
            pass
        return req_id

    # -- routes ----------------------------------------------------------------------------------

    def routes(self) -> list[Route]:
        # every family's POST endpoint; POST /generate is TGI's unless the body says vLLM
        out = [Route("POST", p, self._handler(f), f.error_response) for p, (f, _) in POSTS.items()]
        # the routes a family serves whole (count_tokens, ...), and embeddings and rerank: no
        # prefill/decode split, one instance serves each whole
        out += [Route(e.method, e.pattern, self._whole, f.error_response)
                for f in FAMILIES for e in f.whole if e not in responses.WHOLE]  # fmt: skip
        out += [
            Route("GET", responses.RESPONSE_ID, self._retrieve, responses.error_response),
            Route("DELETE", responses.RESPONSE_ID, self._delete, responses.error_response),
        ]
        out += [Route("POST", e.path, self._whole, e.error_response) for e in pooling.ENDPOINTS]
        return [
            *out,
            Route("GET", "/v1/models", self._models),
            Route("GET", "/v1/pd/instances", self._instances),
            Route("GET", "/v2/health/live", self._live),
            Route("GET", "/v2/health/ready", self._ready),
            Route("GET", "/health", self._ready),
            Route("GET", r"/v2/models/(?P<model>[^/]+)/ready", self._ready),
        ]

    def _handler(self, family: Family) -> Any:
        async def handler(req: HttpRequest) -> HttpResponse:
            return await self.handle(family_of(family, req.path, req.body), req)

        return handler

    async def _live(self, req: HttpRequest) -> HttpResponse:
        return json_response({"live": True})

    async def _ready(self, req: HttpRequest) -> HttpResponse:
        """Ready: a prefill and a decode instance have a model (the one named) READY."""
        ready = self.pool.ready(req.params.get("model", ""))
        return json_response({"ready": ready}, 200 if ready else 503)

    async def _instances(self, req: HttpRequest) -> HttpResponse:
        return json_response(
            {
                "prefill": [i.view() for i in self.pool.prefill],
                "decode": [i.view() for i in self.pool.decode],
                "pending": len(self.pending),
                "stats": dict(self.stats),
                "prefix": {  # requests sent where a prefix of theirs was cached (policy prefix)
                    "hits": self.pool.prefixes.hits,
                    "matchedChars": self.pool.prefixes.matched_chars,
                },
            }
        )

    async def _retrieve(self, req: HttpRequest) -> HttpResponse:
        return retrieved(self.kept.store, req.params["response_id"])

    async def _delete(self, req: HttpRequest) -> HttpResponse:
        return deleted(self.kept.store, req.params["response_id"])

    async def _models(self, req: HttpRequest) -> HttpResponse:
        return await self._on_prefill("GET", "/v1/models", timeout=5.0)

    async def _on_prefill(
        self,
        method: str,
        target: str,
        headers: dict[str, str] | None = None,
        body: bytes | bytearray = b"",
        timeout: float = 60.0,
    ) -> HttpResponse:
        """A request a healthy prefill instance answers whole, its reply as it is."""
        for p in [i for i in self.pool.prefill if i.healthy]:
            try:
                found = await self.client.fetch(
                    p.address, method, target, headers=headers, body=body, timeout=timeout
                )
            except HttpClientError:
                continue
            status, got, answer = found
            answer = forwarding.reply_body(p.address, got, answer)
            media = got.get("content-type", "application/json")
            return HttpResponse(status, answer, media, forwarding.error_headers(got))
        raise Unavailable("no prefill instance is available")

    async def _whole(self, req: HttpRequest) -> HttpResponse:
        """A request served whole by an instance of either role that has its model READY, its
        reply (or error reply) forwarded unchanged; an instance that cannot be reached is marked
        down and the next one is tried."""
        tried: set[Instance] = set()
        last_error = "no instance was tried"
        headers = forwarding.to_prefill(req.headers)
        target = quote(req.path, safe="/:@!$&'()*+,;=-._~")
        target += f"?{req.query.decode('latin-1')}" if req.query else ""
        self.stats["whole"] += 1
        while (i := self.pool.pick_any(tried, lambda: model_of(req))) is not None:
            i.outstanding += len(req.body)
            try:
                status, got, body = await self.client.fetch(
                    i.address, req.method, target, headers=headers, body=req.body,
                    timeout=self.options.prefill_timeout_s,
                )  # fmt: skip
            except HttpClientError as exc:
                i.down(str(exc))
                tried.add(i)
                last_error = f"instance {i.address}: {exc}"
                continue
            finally:
                i.outstanding -= len(req.body)
            body = forwarding.reply_body(i.address, got, body)
            media = got.get("content-type", "application/json")
            return HttpResponse(status, body, media, forwarding.error_headers(got))
        why = self.pool.unavailable("prefill", tried, lambda: model_of(req))
        raise Unavailable(f"{why}; last: {last_error}" if tried else why)

    # -- one request -----------------------------------------------------------------------------

    async def handle(self, family: Family, req: HttpRequest) -> HttpResponse:
        pending = Pending(self.new_id(), family, req)
        self.pending[pending.req_id] = pending
        self.stats["requests"] += 1
        streaming = done = False
        try:
            body, recorder = self.kept.prepare(req)
            reply = await self._dispatch(pending, body, recompute=False)
            done = isinstance(reply, HttpResponse) or reply.last
            if isinstance(reply, HttpResponse):
                return reply  # the prefill instance's own error reply, unchanged
            pending.first = reply.output
            if reply.is_stream:
                streaming = True
                media = family.stream_content_type(reply.output)  # as the instance sends it
                stream = self._relay(pending, reply)
                stream = recorder.observe(stream) if recorder else stream
                return HttpResponse(200, content_type=media, headers=pending.headers, stream=stream)
            body = reply.output if reply.last else await self._finish(pending)
            done = True
            if recorder:
                recorder.whole(body)
            return HttpResponse(200, body, "application/json", pending.headers)
        except ServingError as exc:
            self.stats["failed"] += 1
            response = family.error_response(exc)
            response.headers.update(pending.headers)
            return response
        finally:
            if not streaming:
                self._close(pending, done)

    async def _dispatch(
        self, pending: Pending, body: bytes | bytearray, recompute: bool
    ) -> wire.PrefillReply | HttpResponse:
        """Send to a prefill instance (the next one when one fails): its reply, or its error."""
        tried: set[Instance] = set()
        last_error = "no instance was tried"

        def wanted() -> Wanted:  # read from the request only when the pool needs it
            return pending.wanted

        for _ in range(len(self.pool.prefill) + len(self.pool.decode) + 1):
            p = self.pool.pick_prefill(tried, wanted, lambda: pending.blocks)
            d = self.pool.pick_decode(tried, wanted)
            if p is None or d is None:
                why = self.pool.unavailable("prefill" if p is None else "decode", tried, wanted)
                raise Unavailable(why + (f"; last: {last_error}" if tried else ""))
            pending.assign(d)
            try:
                status, headers, answer = await self._send(p, d, pending, body, recompute)
            except HttpClientError as exc:
                p.down(str(exc))
                tried.add(p)
                last_error = f"prefill instance {p.address}: {exc}"
                self._rekey(pending, d)  # P may have handed it over before it failed
                continue
            answer = forwarding.reply_body(p.address, headers, answer)
            if status == 200:
                return self._reply(p, pending, answer)
            if headers.get(FAILED_HEADER) == "decode":
                tried.add(d)
                last_error = f"decode instance {d.address}: {answer[:200]!r}"
                self.stats["decode_refusals"] += 1
                continue
            if recompute:
                raise Upstream(status, answer.decode("utf-8", "replace"))
            media = headers.get("content-type", "application/json")
            return HttpResponse(status, answer, media, forwarding.error_headers(headers))
        raise Unavailable(f"no instance could take the request ({last_error})")

    async def _send(
        self, p: Instance, d: Instance, pending: Pending, body: bytes | bytearray, recompute: bool
    ) -> tuple[int, dict[str, str], bytes]:
        req = pending.req
        headers = forwarding.to_prefill(req.headers)
        headers |= wire.prefill_headers(
            pending.req_id, d.address.host, d.address.port, recompute, pending.key
        )
        headers |= pending.tenant
        url = quote(req.path, safe="/:@!$&'()*+,;=-._~")
        url += f"?{req.query.decode('latin-1')}" if req.query else ""
        p.outstanding += len(body)
        try:
            return await self.client.fetch(p.address, "POST", url, headers=headers, body=body,
                                           timeout=self.options.prefill_timeout_s)  # fmt: skip
        finally:
            p.outstanding -= len(body)

    def _reply(self, p: Instance, pending: Pending, answer: bytes) -> wire.PrefillReply:
        try:
            reply = wire.parse_prefill_reply(answer)
        except ValueError as exc:
            raise ModelError(f"prefill instance {p.address} answered no PD reply: {exc}") from None
        if reply.req_id != pending.req_id:
            raise ModelError(f"prefill instance {p.address} answered for request {reply.req_id}")
        return reply

    async def _next(self, pending: Pending) -> Item:
        try:
            return await within(pending.queue.get(), self.options.token_timeout_s)
        except TimeoutError:
            where = pending.decode.address if pending.decode else "?"
            return DeadlineExceeded(
                f"decode instance {where} sent nothing for {self.options.token_timeout_s:g} s"
            )

    async def _retry(self, pending: Pending, body: bytes) -> wire.PrefillReply:
        pending.retries += 1
        self.stats["retries"] += 1
        if pending.retries > self.options.max_retry:
            raise ModelError(
                f"the request was recomputed {self.options.max_retry} times; giving up"
            )
        reply = await self._dispatch(pending, body, recompute=True)
        assert isinstance(reply, wire.PrefillReply)
        return reply

    async def _finish(self, pending: Pending) -> bytes:
        """A non-streaming request's answer: D's lastData (or a recomputed P's last reply)."""
        while True:
            item = await self._next(pending)
            if isinstance(item, ServingError):
                raise item
            if item.kind == wire.LAST:
                return item.body
            if item.kind == wire.ERROR:
                raise ModelError(item.body.decode("utf-8", "replace"))
            if item.kind == wire.RETRY:
                reply = await self._retry(pending, item.body)
                if reply.last:
                    return reply.output

    async def _relay(self, pending: Pending, reply: wire.PrefillReply) -> AsyncIterator[bytes]:
        """A streaming request: P's first output, then D's frames until the last one."""
        done = reply.last
        try:
            if reply.output:
                yield reply.output
            while not done:
                item = await self._next(pending)
                chunk, done = await self._on_item(pending, item)
                if chunk:
                    yield chunk
        finally:
            self._close(pending, done)

    async def _on_item(self, pending: Pending, item: Item) -> tuple[bytes, bool]:
        family = pending.family
        if isinstance(item, ServingError):
            self.stats["failed"] += 1
            return family.stream_error(item, pending.first), True
        if item.kind in (wire.DATA, wire.LAST):
            return item.body, item.kind == wire.LAST
        if item.kind == wire.RETRY:
            try:
                again = await self._retry(pending, item.body)
            except ServingError as exc:
                return family.stream_error(exc, pending.first), True
            return again.output, again.last
        message = item.body.decode("utf-8", "replace")
        self.stats["failed"] += 1
        return family.stream_error(ModelError(message), pending.first), True

    # -- frames from the pool --------------------------------------------------------------------

    def _on_frame(self, d: Instance, frame: wire.Frame) -> None:
        pending = self.pending.get(frame.req_id)
        if pending is None:
            if frame.kind != wire.KA:
                self.stats["stray_frames"] += 1
            return
        if pending.decode is not d:  # only the decode instance it was handed to speaks for it
            self._foreign(d, pending, frame)
            return
        pending.queue.put_nowait(frame)

    def _foreign(self, d: Instance, pending: Pending, frame: wire.Frame) -> None:
        self.stats["foreign_frames"] += 1
        pending.foreign += 1
        if pending.foreign == 1:  # once per request: a flood of them is one line
            where = pending.decode.address if pending.decode else "no decode instance"
            log.warning(
                "dropped a %s frame for request %s from decode instance %s: it was assigned "
                "to %s", frame.kind, frame.req_id, d.address, where,
            )  # fmt: skip

    def _on_lost(self, d: Instance, why: str) -> None:
        for pending in self.pending.values():
            if pending.decode is d:
                pending.queue.put_nowait(
                    Unavailable(f"decode instance {d.address} went away: {why}")
                )

    def _rekey(self, pending: Pending, d: Instance) -> None:
        """Go on under a new req-id; the old one is cancelled where it may still run."""
        self.pending.pop(pending.req_id, None)
        self._cancel_later(d, pending.req_id, pending.key)
        pending.req_id, pending.key = self.new_id(), secrets.token_urlsafe(24)
        pending.queue = asyncio.Queue()  # what the old one left there is not this request's
        self.pending[pending.req_id] = pending

    def _close(self, pending: Pending, done: bool) -> None:
        self.pending.pop(pending.req_id, None)
        d = pending.decode
        pending.assign(None)
        if not done and d is not None:  # the client left: stop D's work
            self._cancel_later(d, pending.req_id, pending.key)

    def _cancel_later(self, d: Instance, req_id: str, key: str) -> None:
        if not d.streaming:
            return
        task = asyncio.get_running_loop().create_task(self._cancel(d, req_id, key))
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _cancel(self, d: Instance, req_id: str, key: str) -> None:
        path, headers = f"/v1/pd/decode/{req_id}", {wire.JOB_KEY: key}
        try:
            await self.client.fetch(d.address, "DELETE", path, headers=headers, timeout=5.0)
        except HttpClientError as exc:
            log.info("could not cancel request %s on %s: %s", req_id, d.address, exc)
