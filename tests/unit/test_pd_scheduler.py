"""The scheduler against scripted prefill and decode instances (in-process HTTP servers): what it
sends to P, the order the client sees (D's frames held until P's output went out), retry with
``is-recompute``, error frames, P's errors forwarded, decode refusals, a decode instance lost."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import httpx
import orjson
import pytest

from rosettaserve.pd import wire
from rosettaserve.pd.http_client import PeerClient
from rosettaserve.pd.options import SchedulerOptions
from rosettaserve.pd.scheduler import Scheduler
from rosettaserve.transport.h1 import HttpServer
from rosettaserve.web.app import HttpApp
from rosettaserve.web.routing import HttpRequest, HttpResponse, Route, json_response

PrefillScript = Callable[[HttpRequest], Awaitable[HttpResponse]]


def listen() -> socket.socket:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    sock.setblocking(False)
    return sock


def ready_status(role: str, models: dict[str, dict[str, str]] | None = None) -> dict[str, Any]:
    """A ``/v1/status`` document: ready in ``role``, with these model states (None: none)."""
    doc: dict[str, Any] = {"service": {"roleStatus": "RoleReady", "currentRole": role}}
    return doc | {"resource": {}} | ({} if models is None else {"models": models})


class FakeDecode:
    """A decode instance whose /dresult sends what the test puts in ``frames``; its status is
    ``status`` (a test may change it)."""

    def __init__(self) -> None:
        self.frames: asyncio.Queue[bytes | None] = asyncio.Queue()
        self.cancelled: list[str] = []
        self.url = ""
        self.status = ready_status("decode")
        self.hold: asyncio.Event | None = None  # set: its status waits for it

    def routes(self) -> list[Route]:
        async def dresult(req: HttpRequest) -> HttpResponse:
            return HttpResponse(200, content_type="text/event-stream", stream=self._stream())

        async def cancel(req: HttpRequest) -> HttpResponse:
            self.cancelled.append(req.params["id"])
            return json_response({"cancelled": True})

        async def status(req: HttpRequest) -> HttpResponse:
            if self.hold is not None:
                await self.hold.wait()
            return json_response(self.status)

        return [
            Route("GET", "/dresult", dresult),
            Route("DELETE", r"/v1/pd/decode/(?P<id>\w+)", cancel),
            Route("GET", "/v1/status", status),
        ]

    async def _stream(self) -> AsyncIterator[bytes]:
        while (item := await self.frames.get()) is not None:
            yield item

    def send(self, req_id: str, kind: str, body: bytes) -> None:
        self.frames.put_nowait(wire.frame(req_id, kind, body))


class FakePrefill:
    """A prefill instance that runs ``script`` for every family request and records them."""

    def __init__(self, script: PrefillScript) -> None:
        self.script = script
        self.seen: list[HttpRequest] = []
        self.url = ""
        self.status = ready_status("prefill")

    def routes(self) -> list[Route]:
        async def family(req: HttpRequest) -> HttpResponse:
            self.seen.append(req)
            return await self.script(req)

        async def status(req: HttpRequest) -> HttpResponse:
            return json_response(self.status)

        return [
            Route("POST", r"/v1/completions|/generate|/generate_stream|/infer|/v2/.*", family),
            Route("GET", "/v1/status", status),
        ]


async def serve(routes: list[Route]) -> tuple[str, HttpServer]:
    sock = listen()
    server = HttpServer(HttpApp(routes), 1 << 20)
    await server.start(sock)
    return f"http://127.0.0.1:{sock.getsockname()[1]}", server


async def cluster(
    script: PrefillScript, decodes: int = 1, prefills: int = 1, timeout: float = 300.0
) -> tuple[Scheduler, str, FakePrefill, list[FakeDecode], list[HttpServer]]:
    ps = [FakePrefill(script) for _ in range(prefills)]
    ds = [FakeDecode() for _ in range(decodes)]
    scheduler, url, servers = await schedule(ps, ds, timeout)
    async with httpx.AsyncClient() as client:
        for _ in range(400):
            if (await client.get(url + "/v2/health/ready")).status_code == 200:
                break
            await asyncio.sleep(0.01)
    return scheduler, url, ps[0], ds, servers


async def schedule(
    ps: list[FakePrefill], ds: list[FakeDecode], timeout: float = 300.0
) -> tuple[Scheduler, str, list[HttpServer]]:
    """Serve the fake instances and a scheduler in front of them (polling every 50 ms)."""
    servers = []
    for fake in (*ps, *ds):
        fake.url, server = await serve(fake.routes())
        servers.append(server)
    options = SchedulerOptions(
        tuple(p.url for p in ps),
        tuple(d.url for d in ds),
        policy="round-robin",
        prefill_timeout_s=timeout,
    )
    scheduler = Scheduler(options, PeerClient())
    url, server = await serve(scheduler.routes())
    servers.append(server)
    scheduler.pool.poll_s = 0.05
    scheduler.pool.start()
    return scheduler, url, servers


async def stop(scheduler: Scheduler, servers: list[HttpServer]) -> None:
    await scheduler.pool.stop()
    for server in servers:
        await server.shutdown(timeout=1)


def run(scenario: Callable[[], Awaitable[Any]]) -> Any:
    return asyncio.run(asyncio.wait_for(scenario(), 30))


def reply(req: HttpRequest, output: bytes, last: bool, stream: bool = True) -> HttpResponse:
    return json_response(wire.prefill_reply(req.headers["req-id"], stream, output, last))


def test_what_p_receives_and_the_order_the_client_sees() -> None:
    decodes: list[FakeDecode] = []

    async def script(req: HttpRequest) -> HttpResponse:
        rid = req.headers["req-id"]
        decodes[0].send(rid, wire.DATA, b"data: 2\n\n")  # D is faster than P's reply
        decodes[0].send(rid, wire.LAST, b"data: 3\n\ndata: [DONE]\n\n")
        await asyncio.sleep(0.05)
        return reply(req, b"data: 1\n\n", last=False)

    async def scenario() -> tuple[httpx.Response, FakePrefill, str]:
        scheduler, url, p, ds, servers = await cluster(script)
        decodes.extend(ds)
        body = b'{"model": "m", "prompt": "hi", "stream": true}'
        async with httpx.AsyncClient() as client:
            r = await client.post(
                url + "/v1/completions?x=1",
                content=body,
                headers={
                    "content-type": "application/json",
                    "x-trace": "t1",
                    "req-id": "666",
                    "x-priority": "-3",
                },
            )
        await stop(scheduler, servers)
        return r, p, ds[0].url

    r, p, d_url = run(scenario)
    assert r.status_code == 200
    assert r.headers["content-type"] == "text/event-stream"
    assert r.content == b"data: 1\n\ndata: 2\n\ndata: 3\n\ndata: [DONE]\n\n"
    (sent,) = p.seen
    host, port = d_url.removeprefix("http://").split(":")
    assert (sent.path, sent.query) == ("/v1/completions", b"x=1")
    assert sent.body == b'{"model": "m", "prompt": "hi", "stream": true}'  # unchanged
    assert sent.headers["req-id"] == r.headers["x-pd-req-id"] != "666"  # the client's is dropped
    assert sent.headers["req-id"].isdigit()
    assert sent.headers["d-target"] == f"{host};{port}"
    assert (sent.headers["d-port"], sent.headers["req-type"]) == (port, "prefill")
    assert sent.headers["is-recompute"] == "false"
    assert sent.headers["x-trace"] == "t1"
    assert sent.headers["x-priority"] == "-3"  # P's engine admits by it (core/share.py)


def test_retry_sends_the_rebuilt_body_again_with_is_recompute() -> None:
    decodes: list[FakeDecode] = []

    async def script(req: HttpRequest) -> HttpResponse:
        rid = req.headers["req-id"]
        if req.headers["is-recompute"] == "false":
            decodes[0].send(rid, wire.DATA, b"data:{'n':2}\n\n")
            decodes[0].send(rid, wire.RETRY, b'{"inputs": "2,5,6,7"}')
            return reply(req, b"data:{'n':1}\n\n", last=False)
        return reply(req, b"data:{'n':3}\n\n", last=True)  # the recompute ends at P

    async def scenario() -> tuple[httpx.Response, FakePrefill, Scheduler]:
        scheduler, url, p, ds, servers = await cluster(script)
        decodes.extend(ds)
        async with httpx.AsyncClient() as client:
            r = await client.post(url + "/generate_stream", content=b'{"inputs": "hi"}')
        await stop(scheduler, servers)
        return r, p, scheduler

    r, p, scheduler = run(scenario)
    assert r.content == b"data:{'n':1}\n\ndata:{'n':2}\n\ndata:{'n':3}\n\n"
    first, again = p.seen
    assert again.headers["is-recompute"] == "true"
    assert again.headers["req-id"] == first.headers["req-id"]
    assert again.body == b'{"inputs": "2,5,6,7"}'
    assert scheduler.stats["retries"] == 1


def test_an_error_frame_ends_the_stream_in_the_family_form() -> None:
    decodes: list[FakeDecode] = []

    async def script(req: HttpRequest) -> HttpResponse:
        decodes[0].send(req.headers["req-id"], wire.ERROR, b"Pull kv failed.")
        return reply(req, b'data: {"choices": []}\n\n', last=False)

    async def scenario() -> httpx.Response:
        scheduler, url, _, ds, servers = await cluster(script)
        decodes.extend(ds)
        async with httpx.AsyncClient() as client:
            r = await client.post(url + "/v1/completions", content=b'{"prompt": "x"}')
        await stop(scheduler, servers)
        return r

    events = run(scenario).content.split(b"\n\n")
    assert events[-2:] == [b"data: [DONE]", b""]
    error = orjson.loads(events[1].removeprefix(b"data: "))["error"]
    assert (error["message"], error["type"]) == ("Pull kv failed.", "server_error")


def test_a_non_streaming_answer_comes_from_lastdata() -> None:
    decodes: list[FakeDecode] = []

    async def script(req: HttpRequest) -> HttpResponse:
        async def later() -> None:
            await asyncio.sleep(0.05)  # after P's reply, this time
            decodes[0].send(req.headers["req-id"], wire.LAST, b'{"generated_text": "ok"}')

        asyncio.get_running_loop().create_task(later())
        return reply(req, b"", last=False, stream=False)

    async def scenario() -> httpx.Response:
        scheduler, url, _, ds, servers = await cluster(script)
        decodes.extend(ds)
        async with httpx.AsyncClient() as client:
            r = await client.post(url + "/infer", content=b'{"inputs": "x"}')
        await stop(scheduler, servers)
        return r

    r = run(scenario)
    assert (r.status_code, r.headers["content-type"]) == (200, "application/json")
    assert r.json() == {"generated_text": "ok"}


def test_p_errors_are_forwarded_and_decode_refusals_retried_elsewhere() -> None:
    async def script(req: HttpRequest) -> HttpResponse:
        if "bad" in req.body.decode():
            return json_response({"error": "nope", "error_type": "validation"}, 400)
        if len(seen_targets) == 0:
            seen_targets.append(req.headers["d-target"])
            return json_response({"error": "D down"}, 503, {"x-pd-failed": "decode"})
        seen_targets.append(req.headers["d-target"])
        return reply(req, b'{"generated_text": "whole"}', last=True, stream=False)

    seen_targets: list[str] = []

    async def scenario() -> tuple[httpx.Response, httpx.Response, Scheduler]:
        scheduler, url, _, _, servers = await cluster(script, decodes=2)
        async with httpx.AsyncClient() as client:
            bad = await client.post(url + "/generate", content=b'{"inputs": "bad"}')
            good = await client.post(url + "/generate", content=b'{"inputs": "good"}')
        await stop(scheduler, servers)
        return bad, good, scheduler

    bad, good, scheduler = run(scenario)
    assert (bad.status_code, bad.json()) == (400, {"error": "nope", "error_type": "validation"})
    assert (good.status_code, good.json()) == (200, {"generated_text": "whole"})
    assert len(set(seen_targets)) == 2  # the second try went to the other decode instance
    assert scheduler.stats["decode_refusals"] == 1


def lost_decode(doc: bytes, first: bytes) -> tuple[httpx.Response, Scheduler]:
    """The answer to ``doc`` (on /generate) when P answers ``first`` and the decode instance's
    /dresult stream ends meanwhile (its process died)."""
    decodes: list[FakeDecode] = []
    streamed = b'"stream": true' in doc

    async def script(req: HttpRequest) -> HttpResponse:
        decodes[0].frames.put_nowait(None)
        return reply(req, first, last=False, stream=streamed)

    async def scenario() -> tuple[httpx.Response, Scheduler]:
        scheduler, url, _, ds, servers = await cluster(script)
        decodes.extend(ds)
        async with httpx.AsyncClient() as client:
            r = await client.post(url + "/generate", content=doc)
        await stop(scheduler, servers)
        return r, scheduler

    found: tuple[httpx.Response, Scheduler] = run(scenario)
    return found


def test_a_lost_decode_instance_fails_its_requests_at_once() -> None:
    r, scheduler = lost_decode(b'{"prompt": "x", "stream": true}', b'{"text":["a"]}\n')
    lines = r.content.splitlines()
    assert lines[0] == b'{"text":["a"]}'  # vLLM's framing, delimiter kept
    assert "went away" in orjson.loads(lines[1])["error"]
    assert r.headers["content-type"] == "application/x-ndjson"
    assert scheduler.stats["failed"] == 1


def test_a_lost_decode_instance_refuses_a_waiting_request_with_retry_after() -> None:
    """Before any output (not streamed), its loss is a 503 the client may retry, as every
    other 503 of the scheduler's: with Retry-After."""
    r, _ = lost_decode(b'{"prompt": "x"}', b"")
    assert r.status_code == 503
    assert "went away" in r.json()["error"]
    assert r.headers["retry-after"] == "1"


@pytest.mark.parametrize("policy", ["prefix", "load", "round-robin"])
def test_choice_skips_instances_that_are_down_or_excluded(policy: str) -> None:
    from rosettaserve.pd.pool import Pool

    pool = Pool(
        ["http://127.0.0.1:1", "http://127.0.0.1:2"],
        ["http://127.0.0.1:3", "http://127.0.0.1:4", "http://127.0.0.1:5"],
        policy,
        on_frame=lambda d, f: None,
        on_lost=lambda d, why: None,
        client=PeerClient(),
    )
    assert pool.pick_prefill(set()) is None  # nothing is known to be up yet
    for i in pool.prefill + pool.decode:
        i.healthy = True
    pool.decode[1].healthy = False
    picks = [pool.pick_decode(set()) for _ in range(4)]
    assert pool.decode[1] not in picks
    assert {d.address.port for d in picks if d} == {3, 5}  # in turn when loads are equal
    pool.decode[0].active = 5
    if policy != "round-robin":
        assert pool.pick_decode(set()) is pool.decode[2]
    assert pool.pick_prefill({pool.prefill[0]}) is pool.prefill[1]
    pool.prefill[0].outstanding, pool.prefill[1].outstanding = 10, 0
    chosen = {pool.pick_prefill(set()) for _ in range(3)}
    assert chosen == ({pool.prefill[1]} if policy != "round-robin" else set(pool.prefill))


def test_the_prefix_policy_sends_a_conversation_back_to_its_prefill_instance() -> None:
    from rosettaserve.pd.pool import Pool
    from rosettaserve.pd.prefix_affinity import prompt_blocks

    prefill, decode = ["http://127.0.0.1:1", "http://127.0.0.1:2"], ["http://127.0.0.1:3"]
    pool = Pool(
        prefill,
        decode,
        "prefix",
        on_frame=lambda d, f: None,
        on_lost=lambda d, why: None,
        client=PeerClient(),
    )
    for i in pool.prefill + pool.decode:
        i.healthy = True
    talk = [{"role": "user", "content": "Tell me a long story about a lighthouse. " * 30}]
    first = prompt_blocks("/v1/chat/completions", orjson.dumps({"messages": talk}))
    chosen = pool.pick_prefill(set(), blocks=lambda: first)
    assert chosen is not None
    other = next(p for p in pool.prefill if p is not chosen)
    talk += [{"role": "assistant", "content": "Once..."}, {"role": "user", "content": "Go on"}]
    second = prompt_blocks("/v1/chat/completions", orjson.dumps({"messages": talk}))
    chosen.outstanding = 500  # busier, by less than the prefix it holds
    assert [pool.pick_prefill(set(), blocks=lambda: second) for _ in range(3)] == [chosen] * 3
    assert pool.pick_prefill({chosen}, blocks=lambda: second) is other  # excluded: the other


def test_a_prefill_instance_that_fails_midway_is_retried_under_a_new_id() -> None:
    decodes: list[FakeDecode] = []
    calls: list[str] = []

    async def script(req: HttpRequest) -> HttpResponse:
        rid = req.headers["req-id"]
        calls.append(rid)
        if len(calls) == 1:  # hands over to D, then never answers (it hangs, or died)
            decodes[0].send(rid, wire.DATA, b"data: orphan\n\n")
            await asyncio.sleep(5)
        decodes[0].send(rid, wire.LAST, b"data: 2\n\n")
        return reply(req, b"data: 1\n\n", last=False)

    async def scenario() -> tuple[httpx.Response, list[str]]:
        scheduler, url, _, ds, servers = await cluster(script, prefills=2, timeout=0.3)
        decodes.extend(ds)
        async with httpx.AsyncClient() as client:
            r = await client.post(url + "/generate_stream", content=b'{"inputs": "x"}')
        for _ in range(100):
            if ds[0].cancelled:
                break
            await asyncio.sleep(0.01)
        await stop(scheduler, servers)
        return r, ds[0].cancelled

    r, cancelled = run(scenario)
    first, second = calls
    assert first != second
    assert r.content == b"data: 1\n\ndata: 2\n\n"  # nothing of the orphan
    assert r.headers["x-pd-req-id"] == second
    assert cancelled == [first]  # the orphan is stopped where it may run
