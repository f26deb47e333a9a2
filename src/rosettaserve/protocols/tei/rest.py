"""TEI's routes on an embedding model (``runtime: embedding``).

- ``POST /embed``: ``inputs`` (a text or a list of texts), ``normalize`` (default true: unit
  vectors whatever the model does; false: the pooled vectors as they are), ``truncate``
  (accepted: a text longer than the model reads is always cut, as sentence-transformers does and
  TEI does with ``--auto-truncate``). Answer: ``[[float, ...], ...]``, one vector per text.
- ``POST /rerank`` (a ``task: rerank`` model): ``query``, ``texts``, ``raw_scores`` (the logit
  without the activation), ``return_text``. Answer: ``[{"index", "score"(, "text")}]``, highest
  score first.

Errors in TEI's shape: ``{"error": message, "error_type": "Validation" | "Overloaded" | ...}``.
"""

from __future__ import annotations

from typing import Any

from rosettaserve.core import embedding as hub
from rosettaserve.core.dataplane import DataPlane
from rosettaserve.core.errors import InvalidInput, ServingError
from rosettaserve.core.generate import Fields, json_object
from rosettaserve.web.routing import (
    HttpRequest,
    HttpResponse,
    arrays_json_response,
    json_response,
)

FAMILY = "tei"
ERROR_TYPES = {429: "Overloaded", 503: "Unhealthy"}


def error_response(exc: ServingError) -> HttpResponse:
    status = exc.http_status
    kind = ERROR_TYPES.get(status, "Backend" if status >= 500 else "Validation")
    return json_response({"error": exc.message, "error_type": kind}, status, exc.headers)


async def embed(dp: DataPlane, req: HttpRequest) -> HttpResponse:
    doc = json_object(req.body)
    fields = Fields(doc)
    mv, info = await hub.find(dp, fields.string("model") or "", hub.EMBED)
    texts = hub.texts_field(doc.get("inputs"), "inputs", info)
    normalize = fields.boolean("normalize", True)
    fields.boolean("truncate", False)
    params = {} if normalize or not info.normalize else {"normalize": False}
    done = await hub.embed(dp, mv, FAMILY, [hub.texts_tensor(hub.TEXT, texts)], **params)
    vectors = hub.normalized(done.vectors) if normalize and not info.normalize else done.vectors
    return arrays_json_response(vectors)


async def rerank(dp: DataPlane, req: HttpRequest) -> HttpResponse:
    doc = json_object(req.body)
    fields = Fields(doc)
    mv, info = await hub.find(dp, fields.string("model") or "", hub.RERANK)
    query = fields.string("query")
    hub.check_length(info, len(query or ""))
    if query is None:
        raise InvalidInput("'query' is required: the text the texts are scored against")
    texts = hub.texts_field(doc.get("texts"), "texts", info)
    raw, with_text = fields.boolean("raw_scores", False), fields.boolean("return_text", False)
    fields.boolean("truncate", False)
    done = await hub.embed(dp, mv, FAMILY, hub.pair_tensors(query, texts))
    scores = done.raw if raw and done.raw is not None else done.vectors
    ranked: list[dict[str, Any]] = []
    for i in hub.ranking(scores):
        item: dict[str, Any] = {"index": i, "score": float(scores[i])}
        if with_text:
            item["text"] = texts[i]
        ranked.append(item)
    return json_response(ranked)
