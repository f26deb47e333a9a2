"""The LLM API families, declared once: the server's routes (``routes``), the PD
instance's roles and the PD scheduler all read this table.

Each family: its endpoints (served through the generation plane, with an optional PD split),
the routes it serves whole on every instance (never split), its error reply, the last chunk of
a stream that failed after it began, the media type of its streams, and the sampling table its
requests are read with. vLLM's simple API has no route of
its own: ``POST /generate`` is TGI's unless the body says vLLM (``prompt`` without ``inputs``).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from rosettaserve.core.errors import ServingError
from rosettaserve.core.generate import json_object
from rosettaserve.core.generation_plane import GenerationPlane
from rosettaserve.core.sampling_fields import SamplingTable
from rosettaserve.protocols.anthropic import rest as anthropic
from rosettaserve.protocols.anthropic import schema as anthropic_schema
from rosettaserve.protocols.llm_http import SSE, Endpoint
from rosettaserve.protocols.mindie import rest as mindie
from rosettaserve.protocols.ollama import models as ollama_models
from rosettaserve.protocols.ollama import rest as ollama
from rosettaserve.protocols.ollama import schema as ollama_schema
from rosettaserve.protocols.openai import responses, responses_schema
from rosettaserve.protocols.openai import rest as openai
from rosettaserve.protocols.openai import schema as openai_schema
from rosettaserve.protocols.tgi import rest as tgi
from rosettaserve.protocols.tgi import schema as tgi_schema
from rosettaserve.protocols.triton_generate import rest as triton
from rosettaserve.protocols.vllm import rest as vllm
from rosettaserve.web.routing import HttpRequest, HttpResponse, Route


@dataclass(frozen=True)
class Family:
    name: str  # the protocol label of its requests in the metrics
    endpoints: tuple[Endpoint, ...]
    error_response: Callable[[ServingError], HttpResponse]
    stream_error: Callable[[ServingError, bytes], bytes]  # (error, the stream so far) -> chunk
    stream_content_type: Callable[[bytes], str]  # a stream's media type, from its first chunk
    sampling: SamplingTable
    text_field: str = ""  # the prompt's field when no endpoint of its own says (vLLM's)
    whole: tuple[Endpoint, ...] = ()  # routes that generate nothing, or read what is kept


def _sse(first: bytes) -> str:
    return SSE


OPENAI = Family(
    openai.FAMILY,
    tuple(openai.ENDPOINTS),
    openai.error_response,
    openai.stream_error,
    _sse,
    openai_schema.SAMPLING,
)
TGI = Family(
    tgi.FAMILY,
    tuple(tgi.ENDPOINTS),
    tgi.error_response,
    tgi.stream_error,
    _sse,
    tgi_schema.SAMPLING,
)
VLLM = Family(
    vllm.FAMILY,
    (),  # served on TGI's POST /generate
    vllm.error_response,
    vllm.stream_error,
    vllm.stream_content_type,
    vllm.SAMPLING,
    text_field="prompt",
)
TRITON_GENERATE = Family(
    triton.FAMILY,
    tuple(triton.ENDPOINTS),
    triton.error_response,
    triton.stream_error,
    lambda first: "text/event-stream; charset=utf-8",
    triton.SAMPLING,
)
MINDIE = Family(
    mindie.FAMILY,
    tuple(mindie.ENDPOINTS),
    mindie.error_response,
    mindie.stream_error,
    _sse,
    mindie.SAMPLING,
)
RESPONSES = Family(
    responses.FAMILY,
    tuple(responses.ENDPOINTS),
    responses.error_response,
    responses.stream_error,
    _sse,
    responses_schema.SAMPLING,
    whole=tuple(responses.WHOLE),
)
ANTHROPIC = Family(
    anthropic.FAMILY,
    tuple(anthropic.ENDPOINTS),
    anthropic.error_response,
    anthropic.stream_error,
    _sse,
    anthropic_schema.SAMPLING,
    whole=tuple(anthropic.WHOLE),
)
OLLAMA = Family(
    ollama.FAMILY,
    tuple(ollama.ENDPOINTS),
    ollama.error_response,
    ollama.stream_error,
    ollama.stream_content_type,
    ollama_schema.OPTIONS,
    whole=tuple(ollama_models.WHOLE),
)
FAMILIES = (OPENAI, TGI, VLLM, TRITON_GENERATE, MINDIE, RESPONSES, ANTHROPIC, OLLAMA)
# every POST endpoint by its path pattern, with its family (POST /generate: TGI's, see family_of)
POSTS: dict[str, tuple[Family, Endpoint]] = {
    e.pattern: (f, e) for f in FAMILIES for e in f.endpoints if e.method == "POST"
}


def family_of(family: Family, path: str, body: bytes | bytearray) -> Family:
    """The family a request belongs to: TGI's ``POST /generate`` with a vLLM body is vLLM's."""
    if family is not TGI or path != "/generate":
        return family
    try:
        doc = json_object(body)
    except ServingError:
        return family
    return VLLM if "inputs" not in doc and "prompt" in doc else family


def endpoint_of(path: str) -> tuple[Family, Endpoint, dict[str, str]] | None:
    """The family and POST endpoint whose pattern ``path`` matches, and the path's parameters
    (Triton's model and version)."""
    for pattern, (family, endpoint) in POSTS.items():
        found = re.fullmatch(pattern, path)
        if found:
            params = {k: v for k, v in found.groupdict().items() if v is not None}
            return family, endpoint, params
    return None


def text_field(path: str, body: bytes | bytearray) -> str:
    """The field holding the prompt of a request to ``path`` with this body."""
    found = endpoint_of(path)
    if found is None:
        return ""
    family, endpoint, _ = found
    owner = family_of(family, path, body)
    return owner.text_field if owner is not family else endpoint.text_field


def routes(plane: GenerationPlane) -> list[Route]:
    """Every family's endpoints as the server's routes, each request served whole (a PD role
    wraps the POST ones: pd/instance.py)."""
    return [bind(plane, e, f) for f in FAMILIES for e in (*f.endpoints, *f.whole)]


def bind(plane: GenerationPlane, endpoint: Endpoint, family: Family) -> Route:
    """An endpoint as a route served whole (no PD split)."""

    async def handler(req: HttpRequest) -> HttpResponse:
        return await endpoint.serve(plane, req, None)

    return Route(endpoint.method, endpoint.pattern, handler, family.error_response)
