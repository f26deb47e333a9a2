"""The five LLM API families as the scheduler sees them, read from the one table
(protocols/families.py): their POST paths, and the forms their errors take (a whole reply, or
a last chunk of a stream that already began).

The scheduler forwards bodies without reading them; it reads one only to shape an error for
``POST /generate``, which TGI and vLLM share (``prompt`` means vLLM, as instances decide), and
to find the model a request names while its instances differ in what they have ready.
"""

from __future__ import annotations

import orjson

from rosettaserve.protocols.families import FAMILIES, Family
from rosettaserve.protocols.families import family_of as _family_of
from rosettaserve.web.routing import HttpRequest

__all__ = ["ROUTES", "Family", "family_of", "model_of", "stream_content_type"]

# (path pattern, family) of every POST endpoint; POST /generate is TGI's unless the body says vLLM
ROUTES: list[tuple[str, Family]] = [
    (e.pattern, f) for f in FAMILIES for e in f.endpoints if e.method == "POST"
]


def family_of(path: str, family: Family, body: bytes | bytearray) -> Family:
    return _family_of(family, path, body)


def stream_content_type(family: Family, first: bytes) -> str:
    """The media type of a stream, as the instance would have sent it."""
    return family.stream_content_type(first)


def model_of(req: HttpRequest) -> tuple[str, str]:
    """The model a family request names, and its version: the route's (Triton's
    ``/v2/models/{m}[/versions/{v}]``), else the body's ``model``; ``""`` when it names none (the
    instance's first LLM model serves it), as the families' handlers read them."""
    if "model" in req.params:
        return req.params["model"], req.params.get("version") or ""
    try:
        doc = orjson.loads(req.body)
    except orjson.JSONDecodeError:
        return "", ""  # the prefill instance answers the family's 400
    model = doc.get("model") if isinstance(doc, dict) else None
    return (model, "") if isinstance(model, str) else ("", "")
