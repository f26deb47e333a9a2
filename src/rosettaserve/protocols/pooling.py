"""The embedding and rerank routes, declared once (as families.py declares the LLM families):
the server serves them on the data plane, and the PD scheduler forwards them whole to an
instance that has the model (no prefill/decode split)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from rosettaserve.core.dataplane import DataPlane
from rosettaserve.core.errors import ServingError
from rosettaserve.protocols.openai import embeddings as openai_embeddings
from rosettaserve.protocols.openai import rest as openai_rest
from rosettaserve.protocols.tei import rest as tei
from rosettaserve.protocols.vllm import rerank as vllm_rerank
from rosettaserve.web.routing import HttpRequest, HttpResponse, Route

Serve = Callable[[DataPlane, HttpRequest], Awaitable[HttpResponse]]


@dataclass(frozen=True)
class PoolingEndpoint:
    path: str
    serve: Serve
    error_response: Callable[[ServingError], HttpResponse]


ENDPOINTS = (
    PoolingEndpoint("/v1/embeddings", openai_embeddings.embeddings, openai_rest.error_response),
    PoolingEndpoint("/embed", tei.embed, tei.error_response),
    PoolingEndpoint("/rerank", tei.rerank, tei.error_response),
    PoolingEndpoint("/v1/rerank", vllm_rerank.rerank, openai_rest.error_response),
)
POSTS = {e.path: e for e in ENDPOINTS}


def routes(dp: DataPlane) -> list[Route]:
    return [_bind(dp, e) for e in ENDPOINTS]


def _bind(dp: DataPlane, endpoint: PoolingEndpoint) -> Route:
    serve = endpoint.serve

    async def handler(req: HttpRequest) -> HttpResponse:
        return await serve(dp, req)

    return Route("POST", endpoint.path, handler, endpoint.error_response)
