"""``POST /v1/rerank`` on a cross-encoder (``runtime: embedding``, ``task: rerank``): the
Jina/Cohere-style body as vLLM serves it.

``query``; ``documents``: texts (or objects with a ``text``); ``top_n`` (0 or absent: all);
``return_documents`` (default true); vLLM's ``use_activation`` (default true; false: the raw
logit). Answer: ``{"id", "model", "usage": {"prompt_tokens", "total_tokens"}, "results":
[{"index", "relevance_score", "document": {"text"}}]}``, highest score first. Errors in OpenAI's
shape, as vLLM's.
"""

from __future__ import annotations

import secrets
from typing import Any

from rosettaserve.core import embedding as hub
from rosettaserve.core.dataplane import DataPlane
from rosettaserve.core.errors import InvalidInput
from rosettaserve.core.generate import Fields, json_object
from rosettaserve.web.routing import HttpRequest, HttpResponse, json_response

FAMILY = "vllm"


async def rerank(dp: DataPlane, req: HttpRequest) -> HttpResponse:
    doc = json_object(req.body)
    fields = Fields(doc)
    mv, info = await hub.find(dp, fields.string("model") or "", hub.RERANK)
    query = fields.string("query")
    hub.check_length(info, len(query or ""))
    if query is None:
        raise InvalidInput("'query' is required: the text the documents are scored against")
    texts = hub.texts_field(_documents(doc.get("documents")), "documents", info)
    top_n = fields.integer("top_n", 0, 0) or len(texts)
    with_docs = fields.boolean("return_documents", True)
    activated = fields.boolean("use_activation", True)
    done = await hub.embed(dp, mv, FAMILY, hub.pair_tensors(query, texts))
    scores = done.vectors if activated or done.raw is None else done.raw
    results: list[dict[str, Any]] = []
    for i in hub.ranking(scores)[:top_n]:
        item: dict[str, Any] = {"index": i, "relevance_score": float(scores[i])}
        if with_docs:
            item["document"] = {"text": texts[i]}
        results.append(item)
    tokens = int(done.tokens.sum())
    return json_response(
        {
            "id": f"rerank-{secrets.token_hex(16)}",
            "model": mv.name,
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
            "results": results,
        }
    )


def _documents(value: Any) -> Any:
    """Documents as texts: a document may be an object with a ``text`` (Cohere's and Jina's)."""
    if not isinstance(value, list):
        return value
    return [d.get("text") if isinstance(d, dict) else d for d in value]
