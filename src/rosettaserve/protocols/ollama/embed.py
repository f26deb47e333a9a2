"""Ollama's ``POST /api/embed`` and the older ``POST /api/embeddings`` on an embedding model
(``runtime: embedding``), through the data plane as ``/v1/embeddings`` (the same vectors).

- ``/api/embed``: ``input`` (a text or a list of texts), ``truncate`` (accepted: a text longer
  than the model reads is always cut), ``dimensions`` (the model's size or a Matryoshka one).
  Answer: ``{"model", "embeddings": [[...]], "total_duration", "load_duration",
  "prompt_eval_count"}``.
- ``/api/embeddings``: ``prompt`` (one text). Answer: ``{"embedding": [...]}``.

``options`` and ``keep_alive`` are accepted (nothing of them changes a vector). Errors in
Ollama's shape (``rest.error_response``).
"""

from __future__ import annotations

from time import perf_counter_ns

from rosettaserve.core import embedding as hub
from rosettaserve.core.dataplane import DataPlane
from rosettaserve.core.errors import InvalidInput, ModelNotFound
from rosettaserve.core.generate import Fields, json_object
from rosettaserve.core.registry import ModelVersion
from rosettaserve.protocols.ollama import schema
from rosettaserve.web.routing import HttpRequest, HttpResponse, arrays_json_response

FAMILY = "ollama"


async def _find(dp: DataPlane, name: str) -> tuple[ModelVersion, hub.EmbeddingInfo]:
    base, _ = schema.split_name(name)
    try:
        return await hub.find(dp, base, hub.EMBED)
    except ModelNotFound:
        raise ModelNotFound(f'model "{name}" not found, try pulling it first') from None


async def embed(dp: DataPlane, req: HttpRequest) -> HttpResponse:
    start = perf_counter_ns()
    doc = json_object(req.body)
    fields = Fields(doc)
    name = schema.model_name(doc)
    mv, info = await _find(dp, name)
    fields.boolean("truncate", True)
    dimensions = fields.integer("dimensions", None, 1)
    hub.check_dimensions(info, dimensions)
    texts = hub.texts_field(doc.get("input"), "input", info)
    done = await hub.embed(dp, mv, FAMILY, [hub.texts_tensor(hub.TEXT, texts)])
    vectors = hub.cut(done.vectors, info, dimensions)
    return arrays_json_response(
        {
            "model": name,
            "embeddings": vectors,
            "total_duration": perf_counter_ns() - start,
            "load_duration": 0,
            "prompt_eval_count": int(done.tokens.sum()),
        }
    )


async def embeddings(dp: DataPlane, req: HttpRequest) -> HttpResponse:
    doc = json_object(req.body)
    mv, info = await _find(dp, schema.model_name(doc))
    prompt = doc.get("prompt")
    if not isinstance(prompt, str):
        raise InvalidInput("prompt must be a string")
    if not prompt:  # Ollama answers an empty prompt with an empty vector (a load request)
        return arrays_json_response({"embedding": []})
    texts = hub.texts_field(prompt, "prompt", info)
    done = await hub.embed(dp, mv, FAMILY, [hub.texts_tensor(hub.TEXT, texts)])
    return arrays_json_response({"embedding": done.vectors[0]})
