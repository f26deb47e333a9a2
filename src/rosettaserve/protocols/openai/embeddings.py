"""OpenAI's ``POST /v1/embeddings`` on an embedding model (``runtime: embedding``).

``input``: a text, a list of texts, a list of token ids, or a list of token-id lists;
``encoding_format``: ``float`` (default) or ``base64`` (each vector's little-endian float32 bytes,
what the openai SDK asks for by default and decodes); ``dimensions``: the model's size or one of
its Matryoshka sizes (else 400); ``user`` is accepted and unused. The answer:
``{"object": "list", "data": [{"object": "embedding", "index", "embedding"}], "model", "usage"}``;
errors in OpenAI's shape."""

from __future__ import annotations

import base64
from typing import Any

import numpy as np

from rosettaserve.core import embedding as hub
from rosettaserve.core.dataplane import DataPlane
from rosettaserve.core.errors import InvalidInput
from rosettaserve.core.generate import Fields, json_object
from rosettaserve.core.types import Tensor
from rosettaserve.web.routing import HttpRequest, HttpResponse, arrays_json_response

FAMILY = "openai"
FORMATS = ("float", "base64")


async def embeddings(dp: DataPlane, req: HttpRequest) -> HttpResponse:
    doc = json_object(req.body)
    fields = Fields(doc)
    mv, info = await hub.find(dp, fields.string("model") or "", hub.EMBED)
    fmt = fields.string("encoding_format") or "float"
    if fmt not in FORMATS:
        raise InvalidInput(f"'encoding_format' must be float or base64, got {fmt!r}")
    dimensions = fields.integer("dimensions", None, 1)
    hub.check_dimensions(info, dimensions)
    tensor, token_ids = _input(doc.get("input"), info)
    params = {hub.TOKEN_IDS: True} if token_ids else {}
    done = await hub.embed(dp, mv, FAMILY, [tensor], **params)
    vectors = hub.cut(done.vectors, info, dimensions)
    tokens = int(done.tokens.sum())
    return arrays_json_response(
        {
            "object": "list",
            "data": [_item(i, row, fmt) for i, row in enumerate(vectors)],
            "model": mv.name,
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
        }
    )


def _input(value: Any, info: hub.EmbeddingInfo) -> tuple[Tensor, bool]:
    """The ``input`` field as the TEXT tensor, and whether it holds token ids."""
    if isinstance(value, list) and value and all(_is_id(v) for v in value):
        return hub.ids_tensor(info, [value]), True
    if isinstance(value, list) and value and all(isinstance(v, list) for v in value):
        if not all(_is_id(i) for row in value for i in row):
            raise InvalidInput("'input' as token ids must hold lists of integers")
        hub.check_count(info, len(value), "input")
        return hub.ids_tensor(info, value), True
    if value is None:
        raise InvalidInput("'input' is required: a text, a list of texts or of token ids")
    if isinstance(value, list) and not all(isinstance(v, str) for v in value):
        raise InvalidInput(
            "'input' must be a text, a list of texts, a list of token ids or a list of "
            "token-id lists (not a mix)"
        )
    texts = hub.texts_field(value, "input", info)
    return hub.texts_tensor(hub.TEXT, texts), False


def _is_id(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _item(index: int, row: np.ndarray, fmt: str) -> dict[str, Any]:
    if fmt == "base64":
        data: Any = base64.b64encode(row.astype("<f4").tobytes()).decode("ascii")
    else:
        data = row
    return {"object": "embedding", "index": index, "embedding": data}
