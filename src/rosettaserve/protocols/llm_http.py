"""What the LLM API families share over HTTP: an endpoint served through the generation plane
(with an optional prefill/decode ``Split``), and a streamed reply of a family's framing."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from rosettaserve.core.generation_plane import Framer, Generation, GenerationPlane, Split, frames
from rosettaserve.web.routing import HttpRequest, HttpResponse

SSE = "text/event-stream"
SSE_HEADERS = {"cache-control": "no-cache", "x-accel-buffering": "no"}

Serve = Callable[[GenerationPlane, HttpRequest, Split | None], Awaitable[HttpResponse]]


@dataclass(frozen=True)
class Endpoint:
    """One route of a family; ``serve`` takes the request's split (None: served whole).
    ``text_field``: the body field holding the prompt (a PD recompute body rewrites it)."""

    method: str
    pattern: str
    serve: Serve
    text_field: str = ""


def streamed(
    framer: Framer,
    generation: Generation,
    content_type: str = SSE,
    headers: dict[str, str] | None = None,
) -> HttpResponse:
    body = frames(framer, generation)
    return HttpResponse(200, content_type=content_type, headers=headers or {}, stream=body)
