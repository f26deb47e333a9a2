"""HttpApp remembers how it routed a URL: a URL routes the same the first time and every time
after, each request gets its own path parameters, and the memory stays bounded."""

from __future__ import annotations

import asyncio

import orjson
import pytest

from rosettaserve.security.keys import Guard
from rosettaserve.web import app as http
from rosettaserve.web.app import HttpApp
from rosettaserve.web.routing import HttpRequest, HttpResponse, Route


async def _echo(req: HttpRequest) -> HttpResponse:
    doc = {"path": req.path, "query": req.query.decode(), "params": dict(req.params)}
    req.params["spoiled"] = "by the handler"  # must not reach the next request
    return HttpResponse(200, orjson.dumps(doc))


def app() -> HttpApp:
    return HttpApp(
        [
            Route("POST", r"/v2/models/(?P<model>[^/]+)/infer", _echo),
            Route("GET", "/v2/health/live", _echo),
        ]
    )


def call(a: HttpApp, method: str, url: bytes) -> tuple[int, dict[str, object]]:
    response = asyncio.run(a.respond(method, url, {}, b""))
    return response.status, orjson.loads(response.body)


def test_a_url_routes_alike_every_time_with_fresh_parameters() -> None:
    a = app()
    url = b"/v2/models/m1/infer"
    answers = [call(a, "POST", url) for _ in range(3)]
    expected = {"path": "/v2/models/m1/infer", "query": "", "params": {"model": "m1"}}
    assert answers == [(200, expected)] * 3
    assert call(a, "POST", b"/v2/models/m2/infer")[1]["params"] == {"model": "m2"}


def test_method_and_query_are_part_of_what_is_remembered() -> None:
    a = app()
    assert call(a, "POST", b"/v2/models/m/infer?x=1")[1]["query"] == "x=1"
    assert call(a, "POST", b"/v2/models/m/infer?x=2")[1]["query"] == "x=2"
    status, body = call(a, "GET", b"/v2/models/m/infer")
    assert status == 405
    assert "allowed: POST" in str(body["error"])
    assert call(a, "GET", b"/v2/models/m/infer")[0] == 405  # an error, every time
    assert call(a, "GET", b"/nowhere")[0] == 404


def test_routing_holds_when_the_memory_fills_and_for_long_urls(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(http, "MAX_ROUTED", 4)
    a = app()
    for i in range(20):
        name = f"m{i % 7}"
        status, body = call(a, "POST", f"/v2/models/{name}/infer".encode())
        assert (status, body["params"]) == (200, {"model": name})
    long_name = "n" * (http.MAX_ROUTED_URL + 1)
    for _ in range(2):
        status, body = call(a, "POST", f"/v2/models/{long_name}/infer".encode())
        assert (status, body["params"]) == (200, {"model": long_name})


def test_head_is_open_where_get_is_and_keyed_where_get_is() -> None:
    """With API keys on, HEAD on an open probe is answered as GET is (RFC 9110 §9.3.2: the
    same head); HEAD on a keyed GET route needs the key as GET does."""
    a = HttpApp(
        [
            Route("GET", "/v2/health/live", _echo),
            Route("GET", "/v2/models/m", _echo),
        ]
    )
    a.guard = Guard(["k"])

    def status(method: str, url: bytes, headers: dict[str, str]) -> int:
        return asyncio.run(a.respond(method, url, headers, b"")).status

    for method in ("GET", "HEAD"):
        assert status(method, b"/v2/health/live", {}) == 200
        assert status(method, b"/v2/models/m", {}) == 401
        assert status(method, b"/v2/models/m", {"authorization": "Bearer k"}) == 200
