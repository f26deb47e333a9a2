"""What the scheduler takes from its instances, against scripted ones: it is ready, and sends a
request, only where the request's model is READY (else 503 with Retry-After, in the family's
form); a decode instance that reconnects after a restart waits for a fresh status; a frame for a
request is taken only from the decode instance the request was assigned to; the client's
content coding stays on the client's hop."""

from __future__ import annotations

import asyncio
import gzip
import logging
from collections.abc import Callable
from typing import Any

import httpx
import orjson
import pytest

from rosettaserve.pd import wire
from rosettaserve.pd.scheduler import Scheduler
from rosettaserve.web.routing import HttpRequest, HttpResponse, json_response
from tests.unit.test_pd_scheduler import (
    FakeDecode,
    FakePrefill,
    PrefillScript,
    ready_status,
    reply,
    run,
    schedule,
    stop,
)

READY, LOADING = {"1": "READY"}, {"1": "LOADING"}


async def until(condition: Callable[[], bool]) -> None:
    """Wait for what the scheduler reaches by itself (a guard against a hang, not a timing)."""
    for _ in range(1000):
        if condition():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the condition was never reached")


def seen_by(scheduler: Scheduler, fake: FakeDecode | FakePrefill) -> Any:
    """The scheduler's view of a fake instance."""
    port = int(fake.url.rsplit(":", 1)[1])
    return next(i for i in scheduler.pool.prefill + scheduler.pool.decode if i.address.port == port)


def target(req: HttpRequest) -> HttpResponse:
    """A prefill instance's whole answer naming the decode instance it was told to use."""
    body = orjson.dumps({"d": req.headers["d-target"].split(";")[1]})
    return reply(req, body, last=True, stream=False)


def port_of(fake: FakeDecode) -> str:
    return fake.url.rsplit(":", 1)[1]


async def answer_with_target(req: HttpRequest) -> HttpResponse:
    if b"unknown" in req.body:
        return json_response({"error": "model 'unknown' does not exist"}, 404)
    return target(req)


def test_a_decode_instance_is_chosen_only_once_its_model_is_ready() -> None:
    async def scenario() -> None:
        p, d = FakePrefill(answer_with_target), FakeDecode()
        p.status = ready_status("prefill", {"m": READY})
        d.status = {
            "service": {"roleStatus": "RoleUnknown", "currentRole": "decode"},
            "models": {"m": LOADING},
        }
        scheduler, url, servers = await schedule([p], [d])
        view = seen_by(scheduler, d)
        await until(lambda: view.streaming and view.models == {"m": LOADING})
        async with httpx.AsyncClient(base_url=url) as client:
            assert (await client.get("/v2/health/ready")).status_code == 503
            assert (await client.get("/v2/models/m/ready")).status_code == 503
            r = await client.post("/v1/completions", json={"model": "m", "prompt": "x"})
            assert (r.status_code, r.headers["retry-after"]) == (503, "1")
            assert "decode" in r.json()["error"]["message"]  # OpenAI's error object
            assert p.seen == []  # nothing reached the prefill instance
            d.status = ready_status("decode", {"m": READY})
            await until(lambda: view.healthy)
            assert (await client.get("/v2/health/ready")).status_code == 200
            assert (await client.get("/v2/models/m/ready")).status_code == 200
            assert (await client.get("/v2/models/other/ready")).status_code == 503
            r = await client.post("/v1/completions", json={"model": "m", "prompt": "x"})
            assert (r.status_code, r.json()) == (200, {"d": port_of(d)})
        await stop(scheduler, servers)

    run(scenario)


def test_each_request_goes_where_its_model_is_ready() -> None:
    """a: READY on the first decode instance only, b: on the second only, c: loading on both.
    A request for c is refused while requests for a and b beside it are served as they would
    be alone; a model no instance knows is the prefill instance's to answer (404)."""

    async def scenario() -> None:
        p, d1, d2 = FakePrefill(answer_with_target), FakeDecode(), FakeDecode()
        p.status = ready_status("prefill", {"a": READY, "b": READY, "c": READY})
        d1.status = ready_status("decode", {"a": READY, "b": LOADING, "c": LOADING})
        d2.status = ready_status("decode", {"a": LOADING, "b": READY, "c": LOADING})
        scheduler, url, servers = await schedule([p], [d1, d2])
        await until(scheduler.pool.ready)
        async with httpx.AsyncClient(base_url=url) as client:

            async def post(path: str, doc: dict[str, Any]) -> httpx.Response:
                return await client.post(path, json=doc)

            jobs = [
                post("/v1/completions", {"model": m, "prompt": "x"})
                for m in ("a", "c", "b", "a", "c", "b")
            ]
            jobs.append(post("/v2/models/b/generate", {"text_input": "x"}))  # Triton's path
            jobs.append(post("/v2/models/c/versions/1/generate", {"text_input": "x"}))
            jobs.append(post("/generate", {"inputs": "x"}))  # no model: the first one, a
            jobs.append(post("/v1/completions", {"model": "unknown", "prompt": "x"}))
            answers = await asyncio.gather(*jobs)
        await stop(scheduler, servers)
        got = [(r.status_code, r.json().get("d")) for r in answers]
        a, b = port_of(d1), port_of(d2)
        assert got[:9] == [
            (200, a),
            (503, None),
            (200, b),
            (200, a),
            (503, None),
            (200, b),
            (200, b),
            (503, None),
            (200, a),
        ]
        assert answers[1].json()["error"]["message"].startswith("model 'c' is not ready")
        triton = answers[7].json()["error"]  # Triton's error form: {"error": message}
        assert triton.startswith("model 'c' version 1 is not ready on any decode instance")
        assert (got[9], answers[9].json()) == (
            (404, None),
            {"error": "model 'unknown' does not exist"},
        )

    run(scenario)


def test_a_reconnected_decode_instance_waits_for_a_fresh_status() -> None:
    """Its /dresult comes back (the process restarted) while its status cannot be read: the
    status from before the restart does not make it ready again."""

    async def scenario() -> None:
        p, d = FakePrefill(answer_with_target), FakeDecode()
        scheduler, url, servers = await schedule([p], [d])
        view = seen_by(scheduler, d)
        await until(lambda: view.healthy)
        d.hold = asyncio.Event()  # its status hangs from now on
        d.frames.put_nowait(None)  # its /dresult ends: the process went away
        await until(lambda: view.connections == 2)  # and came back
        async with httpx.AsyncClient(base_url=url) as client:
            r = await client.post("/generate", json={"inputs": "x"})
            assert r.status_code == 503
            assert set(r.json()) == {"error", "error_type"}  # TGI's form
            d.hold.set()
            await until(lambda: view.healthy)
            r = await client.post("/generate", json={"inputs": "x"})
            assert (r.status_code, r.json()) == (200, {"d": port_of(d)})
        await stop(scheduler, servers)

    run(scenario)


def forging(decodes: list[FakeDecode], stream: bool) -> PrefillScript:
    """A prefill instance that hands over to the decode instance named; the other decode
    instance sends frames for the same request first (as a rogue or confused one would)."""

    async def script(req: HttpRequest) -> HttpResponse:
        rid, port = req.headers["req-id"], req.headers["d-target"].split(";")[1]
        assigned = next(d for d in decodes if port_of(d) == port)
        rogue = next(d for d in decodes if d is not assigned)
        rogue.send(rid, wire.DATA, b"data: FORGED\n\n")
        rogue.send(rid, wire.LAST, b'{"text": "FORGED"}' if not stream else b"data: FORGED\n\n")
        await asyncio.sleep(0.05)  # the forged frames arrive before the real ones
        if stream:
            assigned.send(rid, wire.DATA, b"data: 2\n\n")
            assigned.send(rid, wire.LAST, b"data: 3\n\n")
            return reply(req, b"data: 1\n\n", last=False)
        assigned.send(rid, wire.LAST, b'{"text": "real"}')
        return reply(req, b"", last=False, stream=False)

    return script


@pytest.mark.parametrize("stream", [True, False])
def test_frames_from_a_decode_instance_not_assigned_are_dropped(
    stream: bool, caplog: pytest.LogCaptureFixture
) -> None:
    decodes: list[FakeDecode] = [FakeDecode(), FakeDecode()]

    async def scenario() -> tuple[httpx.Response, Scheduler]:
        p = FakePrefill(forging(decodes, stream))
        scheduler, url, servers = await schedule([p], decodes)
        await until(
            lambda: scheduler.pool.ready() and all(d.healthy for d in scheduler.pool.decode)
        )
        async with httpx.AsyncClient() as client:
            r = await client.post(url + "/generate_stream", json={"inputs": "x", "stream": stream})
        await stop(scheduler, servers)
        return r, scheduler

    with caplog.at_level(logging.WARNING, "rosettaserve.pd.scheduler"):
        r, scheduler = run(scenario)
    assert r.status_code == 200
    assert r.content == (b"data: 1\n\ndata: 2\n\ndata: 3\n\n" if stream else b'{"text": "real"}')
    assert scheduler.stats["foreign_frames"] == 2
    (line,) = [m for m in caplog.messages if "dropped" in m]  # one line per request
    assert r.headers["x-pd-req-id"] in line


# -- content coding -------------------------------------------------------------------------------


def test_the_client_content_coding_stays_on_its_hop() -> None:
    """A gzip body and hop-by-hop fields from the client; a prefill instance that codes its
    replies whatever it is asked: P gets the body once inflated, asked for no coding; the
    client gets P's answers decoded (and coded again only as it accepts)."""

    async def script(req: HttpRequest) -> HttpResponse:
        body = b'{"generated_text": "' + b"w" * 2000 + b'"}'
        if b"busy" in req.body:
            answer = json_response({"error": "busy"}, 503, {"retry-after": "7"})
        else:
            answer = reply(req, body, last=True, stream=False)
        answer.body = gzip.compress(answer.body)
        answer.headers["content-encoding"] = "gzip"
        return answer

    async def scenario() -> tuple[list[httpx.Response], FakePrefill]:
        p, d = FakePrefill(script), FakeDecode()
        scheduler, url, servers = await schedule([p], [d])
        await until(scheduler.pool.ready)
        headers = {"content-encoding": "gzip", "accept-encoding": "gzip", "x-trace": "t1"}
        headers |= {"connection": "keep-alive, x-hop", "x-hop": "1", "content-md5": "Zm9v"}
        async with httpx.AsyncClient(base_url=url) as client:
            answers = [
                await client.post(path, content=gzip.compress(body), headers=headers)
                for path, body in (
                    ("/generate", b'{"inputs": "x"}'),
                    ("/infer", b'{"inputs": "busy"}'),
                )
            ]
        await stop(scheduler, servers)
        return answers, p

    (ok, busy), p = run(scenario)
    assert (ok.status_code, ok.headers["content-encoding"]) == (200, "gzip")  # the scheduler's
    assert ok.json() == {"generated_text": "w" * 2000}
    assert (busy.status_code, busy.json(), busy.headers["retry-after"]) == (
        503,
        {"error": "busy"},
        "7",
    )
    for sent in p.seen:
        assert sent.headers["accept-encoding"] == "identity"
        assert {"content-encoding", "x-hop", "content-md5"}.isdisjoint(sent.headers)
        assert sent.headers["x-trace"] == "t1"
    assert [s.body for s in p.seen] == [b'{"inputs": "x"}', b'{"inputs": "busy"}']
