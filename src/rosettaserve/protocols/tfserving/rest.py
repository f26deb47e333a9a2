"""TensorFlow Serving REST API v1: routes, each a few lines over the data plane.

Like TF, one handler parses every path under ``/v1/models`` with TF's own two patterns (matched
case-insensitively; the verb and ``metadata`` are then compared in lower case, so ``:PREDICT``
is malformed and ``/METADATA`` is a status request), and anything else there, or any other
method, is ``400 Malformed request: <METHOD> <path>``.

``GET /v1/models/{model}`` is also OpenAI's ``models.retrieve()``: its one body carries OpenAI's
model object (``id``, ``object``, ``created``, ``owned_by``) beside TF Serving's
``model_version_status``; each client reads its own fields and ignores the others.
"""

from __future__ import annotations

import re
import time
from typing import Any

from rosettaserve.core.dataplane import DataPlane
from rosettaserve.core.errors import InvalidInput
from rosettaserve.core.executor import run_sized
from rosettaserve.core.generate import TextGenerator
from rosettaserve.core.model import Arrays
from rosettaserve.core.registry import ModelVersion
from rosettaserve.protocols.openai.convert import model_card
from rosettaserve.protocols.tfserving import (
    convert,
    examples,
    jsonio,
    schema,
    service,
    signatures,
)
from rosettaserve.protocols.tfserving.signatures import Signature
from rosettaserve.protocols.tfserving.status import (
    Target,
    model_status,
    pretty,
    render_error,
    servable,
)
from rosettaserve.web.routing import HttpRequest, HttpResponse, Route

PATH = r"(?i)/v1/models(?:[/:].*)?"
# HEAD is not listed: the router serves it with the GET route, and HTTP/1.1 drops the body.
METHODS = ("GET", "POST", "PUT", "DELETE", "PATCH", "OPTIONS")
_VERSIONED = r"(?:/versions/([0-9]+)|/labels/([^/:]+))?"
_POST = re.compile(r"(?i)/v1/models/([^/:]+)" + _VERSIONED + r":(classify|regress|predict)")
_GET = re.compile(r"(?i)/v1/models(?:/([^/:]+))?" + _VERSIONED + r"(?:/(metadata))?")
_INT64_MAX = 2**63 - 1
PROTOCOL = "tfserving_rest"  # the metrics label


def routes(dp: DataPlane) -> list[Route]:
    verbs = {"predict": _predict, "classify": _classify, "regress": _regress}

    async def handle(req: HttpRequest) -> HttpResponse:
        if req.method == "POST" and (found := _POST.fullmatch(req.path)):
            verb = verbs.get(found.group(4))
            if verb is not None:
                return await verb(dp, _target(found), req.body)  # inflated already
        elif req.method == "GET" and (found := _GET.fullmatch(req.path)):
            if not found.group(1):
                raise InvalidInput("Missing model name in request.")
            if found.group(4) == "metadata":
                return pretty(signatures.metadata(servable(dp, _target(found))))
            target = _target(found)
            return pretty(_openai_model(dp, target.model) | model_status(dp, target))
        raise InvalidInput(f"Malformed request: {req.method} {req.path}")

    return [Route(method, PATH, handle, render_error) for method in METHODS]


def _openai_model(dp: DataPlane, name: str) -> dict[str, Any]:
    """OpenAI's model object for ``name`` (an LLM's card, with its context window)."""
    versions = dp.registry.versions(name) or []
    model = versions[-1].model if versions else None
    if isinstance(model, TextGenerator):
        return model_card(name, model.info.created, model.info.max_model_len)
    return {"id": name, "object": "model", "created": int(time.time()), "owned_by": "rosettaserve"}


def _target(found: re.Match[str]) -> Target:
    name, version, label = found.group(1), found.group(2), found.group(3)
    if version is not None and int(version) > _INT64_MAX:
        raise InvalidInput(f"Failed to convert version: {version} to numeric.")
    return Target(name, None if version is None else int(version), label)


async def _predict(dp: DataPlane, target: Target, raw: bytes | bytearray) -> HttpResponse:
    # a large body is read on the request-work threads: its values are read one by one
    mv, signature, fmt, arrays = await run_sized(len(raw), _predict_inputs, dp, target, raw)
    outputs = await service.predict(dp, mv, signature, arrays, signature.outputs, protocol=PROTOCOL)
    return HttpResponse(200, convert.encode_predict(fmt, outputs))


def _predict_inputs(
    dp: DataPlane, target: Target, raw: bytes | bytearray
) -> tuple[ModelVersion, Signature, str, Arrays]:
    body = jsonio.load_object(raw)
    name = convert.signature_name(body.doc)
    mv = servable(dp, target)
    signature = signatures.find(mv, name, schema.PREDICT)
    fmt, arrays = convert.predict_inputs(body, signature.inputs)
    return mv, signature, fmt, arrays


async def _classify(dp: DataPlane, target: Target, raw: bytes | bytearray) -> HttpResponse:
    request = await run_sized(len(raw), _examples, raw)
    done = await service.classify(dp, target, request, PROTOCOL)
    return HttpResponse(200, examples.classify_json(done.labels, done.scores))


async def _regress(dp: DataPlane, target: Target, raw: bytes | bytearray) -> HttpResponse:
    request = await run_sized(len(raw), _examples, raw)
    done = await service.regress(dp, target, request, PROTOCOL)
    return HttpResponse(200, examples.regress_results(done.values))


def _examples(raw: bytes | bytearray) -> examples.ExamplesRequest:
    """A classify or regress body read (on the request-work threads when large)."""
    return examples.parse(jsonio.load_object(raw))
