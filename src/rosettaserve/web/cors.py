"""CORS (the Fetch standard's CORS protocol), for browser pages on other origins.

Off unless origins are given (``--cors-origin``, repeatable; ``*`` for any). A preflight
(``OPTIONS`` with ``Access-Control-Request-Method``) from an allowed origin is answered 204 with
the methods and headers allowed, before routing and before any API key is asked: browsers never
send credentials on a preflight. Every other answer to an allowed origin carries
``Access-Control-Allow-Origin`` (the origin itself, with ``Vary: Origin``, unless ``*``), and
the headers a page may read (the request id, the binary extension's header length).
"""

from __future__ import annotations

from rosettaserve.web.routing import HttpResponse

ALLOW_METHODS = "GET, POST, PUT, DELETE, HEAD, OPTIONS"
EXPOSE_HEADERS = "X-Request-ID, Inference-Header-Content-Length, Content-Encoding"
MAX_AGE_S = 600  # how long a browser may keep a preflight's answer
MAX_REQUEST_HEADERS = 1024  # the characters of Access-Control-Request-Headers echoed


class Cors:
    def __init__(self, origins: tuple[str, ...]) -> None:
        self.any = "*" in origins
        self.origins = frozenset(o.rstrip("/") for o in origins if o != "*")

    def allowed(self, origin: str | None) -> str | None:
        """What Access-Control-Allow-Origin says to ``origin`` (None: nothing, not allowed)."""
        if origin is None:
            return None
        if self.any:
            return "*"
        return origin if origin in self.origins else None

    def preflight(self, headers: dict[str, str]) -> HttpResponse | None:
        """The answer to an OPTIONS request that is a preflight (None: it is not one)."""
        method = headers.get("access-control-request-method")
        if method is None:
            return None
        if self.allowed(headers.get("origin")) is None:  # no CORS headers: the browser refuses
            return HttpResponse(204, b"", "text/plain")
        answer = {
            "access-control-allow-methods": ALLOW_METHODS,
            "access-control-max-age": str(MAX_AGE_S),
        }
        asked = headers.get("access-control-request-headers", "")
        if asked and len(asked) <= MAX_REQUEST_HEADERS and asked.isprintable():
            answer["access-control-allow-headers"] = asked
        return HttpResponse(204, b"", "text/plain", answer)  # add_headers: the origin's part

    def add_headers(self, headers: dict[str, str], origin: str | None) -> None:
        """The CORS headers of an answer to ``origin``'s request, added to ``headers`` (the
        answer's own copy)."""
        allow = self.allowed(origin)
        if allow is not None:
            headers["access-control-allow-origin"] = allow
            headers["access-control-expose-headers"] = EXPOSE_HEADERS
        if allow != "*" and not self.any:  # the answer depends on the origin
            vary = headers.get("vary")
            headers["vary"] = f"{vary}, Origin" if vary else "Origin"
