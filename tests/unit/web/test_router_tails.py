"""The router tries a path only against patterns that can match its last segment, and keeps
declaration order among those."""

from __future__ import annotations

import pytest

from rosettaserve.core.errors import NotFound
from rosettaserve.web.routing import HttpRequest, HttpResponse, Route, Router


async def _nothing(req: HttpRequest) -> HttpResponse:
    return HttpResponse(200)


def router(*patterns: str) -> Router:
    return Router([Route("GET", p, _nothing) for p in patterns])


def matched(r: Router, path: str) -> str:
    return r.match("GET", path)[0].pattern


def test_literal_tails_and_open_patterns_in_declaration_order() -> None:
    r = router(r"/m/(?P<x>[^/]+)/infer", r"/m/(?P<x>.+)", r"/m/(?P<x>[^/]+)/ready")
    assert matched(r, "/m/a/infer") == r"/m/(?P<x>[^/]+)/infer"
    assert matched(r, "/m/a/ready") == r"/m/(?P<x>.+)"  # declared before the /ready one
    assert matched(r, "/m/a/b/c") == r"/m/(?P<x>.+)"
    with pytest.raises(NotFound):
        matched(router(r"/m/(?P<x>[^/]+)/infer"), "/m/a/other")


@pytest.mark.parametrize(
    ("pattern", "path"),
    [
        (r"(?i)/m/(?P<x>[^/]+)/infer", "/M/a/INFER"),  # case-insensitive
        (r"/m/(?P<x>[^/]+)/in.er", "/m/a/inxer"),  # a dot matches any character
        (r"/m/a/b|/m/(?P<x>[^/]+)/infer", "/m/a/b"),  # alternation
        (r"/m/(?P<x>[^/]+)/(?:infer|run)", "/m/a/run"),
    ],
)
def test_tails_that_are_not_plain_text_are_always_tried(pattern: str, path: str) -> None:
    assert matched(router(pattern, r"/other/(?P<y>[^/]+)/infer"), path) == pattern
