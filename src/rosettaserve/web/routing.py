"""HTTP requests, responses and routes as every REST protocol sees them (no framework types)."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

import orjson

from rosettaserve.core.errors import MethodNotAllowed, NotFound, ServingError, Unsupported

# Built for every request: both define their __init__ (why: scripts/compile_native.py).


@dataclass(init=False, slots=True)
class HttpRequest:
    method: str
    path: str
    query: bytes
    headers: dict[str, str]  # lower-case names
    body: bytes | bytearray  # a large body arrives in the buffer it was read into
    params: dict[str, str]  # the route's path parameters

    def __init__(
        self,
        method: str,
        path: str,
        query: bytes,
        headers: dict[str, str],
        body: bytes | bytearray,
        *,
        params: dict[str, str] | None = None,
    ) -> None:
        self.method = method
        self.path = path
        self.query = query
        self.headers = headers
        self.body = body
        self.params = {} if params is None else params

    def header(self, name: str) -> str | None:
        return self.headers.get(name)


@dataclass(init=False, slots=True)
class HttpResponse:
    status: int
    body: bytes
    content_type: str
    headers: dict[str, str]
    stream: AsyncIterator[bytes] | None  # set: sent chunk by chunk, `body` unused
    tail: tuple[bytes | memoryview, ...]  # sent after `body` as they are, never joined

    def __init__(
        self,
        status: int,
        body: bytes = b"",
        content_type: str = "application/json",
        headers: dict[str, str] | None = None,
        *,
        stream: AsyncIterator[bytes] | None = None,
        tail: tuple[bytes | memoryview, ...] = (),
    ) -> None:
        self.status = status
        self.body = body
        self.content_type = content_type
        self.headers = {} if headers is None else headers
        self.stream = stream
        self.tail = tail

    @property
    def length(self) -> int:
        return len(self.body) + sum(len(part) for part in self.tail)


Handler = Callable[[HttpRequest], Awaitable[HttpResponse]]
ErrorRenderer = Callable[[ServingError], HttpResponse]


def json_response(
    doc: Any, status: int = 200, headers: dict[str, str] | None = None
) -> HttpResponse:
    return HttpResponse(status, orjson.dumps(doc), "application/json", headers or {})


def arrays_json_response(doc: Any) -> HttpResponse:
    """A JSON answer holding numpy arrays, which orjson writes itself (in C; a float32 as the
    shortest text that reads back as the same float32): vectors need no Python floats."""
    return HttpResponse(
        200, orjson.dumps(doc, option=orjson.OPT_SERIALIZE_NUMPY), "application/json", {}
    )


def error_body(exc: ServingError) -> HttpResponse:
    """The Open Inference Protocol's error shape, the default for routes that name none."""
    return json_response({"error": exc.message}, exc.http_status, exc.headers)


@dataclass(frozen=True, slots=True)
class Route:
    method: str
    pattern: str  # a regex over the whole path, with named groups for parameters
    handler: Handler
    on_error: ErrorRenderer = error_body


Patterns = list[tuple[re.Pattern[str], dict[str, Route]]]


class Router:
    """Exact paths by dict lookup; patterned paths by one regex each, in declaration order.

    A pattern whose last path segment is literal (``.../infer``) can only match a path that ends
    in that segment, so a path is tried against those and the patterns that end otherwise, not
    against every pattern (the order among them is kept)."""

    def __init__(self, routes: list[Route]) -> None:
        self._exact: dict[str, dict[str, Route]] = {}
        self._patterns: Patterns = []
        self._by_last: dict[str, Patterns] = {}
        index: dict[str, dict[str, Route]] = {}
        for route in routes:
            methods = index.setdefault(route.pattern, {})
            methods[route.method] = route
        tails: list[str | None] = []
        for pattern, methods in index.items():
            if _is_literal(pattern):
                self._exact[pattern] = methods
            else:
                self._patterns.append((re.compile(pattern), methods))
                tails.append(_literal_tail(pattern))
        for last in {t for t in tails if t is not None}:
            self._by_last[last] = [
                p for p, t in zip(self._patterns, tails, strict=True) if t in (None, last)
            ]
        self._unsegmented = [p for p, t in zip(self._patterns, tails, strict=True) if t is None]
        self._methods = {route.method for route in routes}
        if "GET" in self._methods:
            self._methods.add("HEAD")

    def check_method(self, method: str) -> None:
        """A method no route has is not implemented (501, RFC 9110 §9.1), whatever the path."""
        if method not in self._methods:
            raise Unsupported(f"Not Implemented: method {method} is not served here")

    def match(self, method: str, path: str) -> tuple[Route, dict[str, str]]:
        """The route for ``method`` on ``path`` (a method ``check_method`` passed): HEAD is
        served by the GET route (RFC 9110 §9.3.2)."""
        methods = self._exact.get(path)
        params: dict[str, str] = {}
        if methods is None:
            last = path.rpartition("/")[2]
            for regex, candidates in self._by_last.get(last, self._unsegmented):
                found = regex.fullmatch(path)
                if found:
                    methods = candidates
                    params = {k: v for k, v in found.groupdict().items() if v is not None}
                    break
        if methods is None:
            raise NotFound(f"Not Found: no route for {method} {path}")
        route = methods.get(method)
        if route is None and method == "HEAD":
            route = methods.get("GET")
        if route is None:
            return _not_allowed(method, path, methods), params
        return route, params


def _not_allowed(method: str, path: str, methods: dict[str, Route]) -> Route:
    """A route answering 405 with ``Allow``, in the error shape of the protocol that serves
    ``path`` (grps's status, OpenAI's error object, TGI's, ...), like its other errors."""
    allowed = ", ".join(sorted({*methods, "HEAD"} if "GET" in methods else methods))
    owner = next(iter(methods.values()))
    message = f"Method Not Allowed: {method} {path} (allowed: {allowed})"
    return Route(method, owner.pattern, partial(_refuse, message, allowed), owner.on_error)


async def _refuse(message: str, allowed: str, request: HttpRequest) -> HttpResponse:
    raise MethodNotAllowed(message, headers={"allow": allowed})


def _literal_tail(pattern: str) -> str | None:
    """The pattern's last path segment when every path it matches ends in exactly that."""
    tail = pattern.rpartition("/")[2]
    if not tail or "|" in pattern or "(?i" in pattern or "." in tail or not _is_literal(tail):
        return None
    return tail


def _is_literal(pattern: str) -> bool:
    return not any(ch in pattern for ch in "()[]?*+\\^$|{}")
