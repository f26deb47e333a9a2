"""MindIE's native API: ``POST /infer`` (text ``inputs``) and ``POST /infer_token``
(``input_id``: token ids); both accept either, and both at once is an "Input conflict.".

Non-streaming: ``{"generated_text", "details"?: {finish_reason, generated_tokens,
generated_token_ids, seed}}``. Streaming: ``data: {json}\\n\\n`` per token,
``{"prefill_time"|"decode_time", "token": {"id", "text"}}``; the last event carries
``generated_text``, ``details`` (or null) and ``token: {"id", "text": null}``, as MindIE's
``EncodeSelfDevelopStreamResponse`` writes them. Errors: ``{"error", "error_type"}``.
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Any

import orjson

from rosettaserve.core.errors import InvalidInput, ServingError
from rosettaserve.core.generate import (
    Completion,
    Fields,
    GenerateDelta,
    GenerateRequest,
    json_object,
)
from rosettaserve.core.generation_plane import GenerationPlane, Split
from rosettaserve.core.sampling_fields import read_sampling
from rosettaserve.protocols.llm_http import SSE, Endpoint, streamed
from rosettaserve.protocols.tgi import schema as tgi_schema
from rosettaserve.protocols.tgi.schema import inputs_text
from rosettaserve.protocols.vllm.rest import error_response
from rosettaserve.web.routing import HttpRequest, HttpResponse, json_response

FAMILY = "mindie"
DEFAULT_MAX_NEW_TOKENS = 20  # MindIE's default
SAMPLING = replace(tgi_schema.SAMPLING, default_max_new_tokens=DEFAULT_MAX_NEW_TOKENS, fixed={})

__all__ = ["ENDPOINTS", "error_response", "stream_error"]


def sse(doc: Any) -> bytes:
    return b"data: " + orjson.dumps(doc) + b"\n\n"


def stream_error(exc: ServingError, first: bytes) -> bytes:
    return sse({"error": exc.message, "error_type": "Incomplete Generation"})


def prompt_of(doc: dict[str, Any], request: GenerateRequest) -> None:
    if "inputs" in doc and "input_id" in doc:
        raise InvalidInput("Input conflict.")
    if "inputs" in doc:
        request.prompt = inputs_text(doc)
        return
    ids = doc.get("input_id")
    if ids is None:
        raise InvalidInput("Not found inputs.")
    if not isinstance(ids, list) or not ids:
        raise InvalidInput("Parameter input_id must be a non-empty array")
    if not all(isinstance(i, int) and not isinstance(i, bool) for i in ids):
        raise InvalidInput("Parameter input_id must be integer")
    negative = [i for i in ids if i < 0]
    if negative:  # (ids past the vocabulary's end: the engine, which knows its size, says so)
        raise InvalidInput(
            f"Parameter input_id holds token id {negative[0]}, which is out of the vocabulary "
            "(token ids start at 0)"
        )
    request.prompt_token_ids = list(ids)


def details(c: Completion, seed: int | None, with_ids: bool) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "finish_reason": c.finish_reason.value if c.finish_reason else None,
        "generated_tokens": len(c.token_ids),
    }
    if with_ids:
        doc["generated_token_ids"] = c.token_ids
    doc["seed"] = seed
    return doc


async def infer(plane: GenerationPlane, req: HttpRequest, split: Split | None) -> HttpResponse:
    doc = json_object(req.body)
    f = Fields(doc)
    p = f.object("parameters")
    mv, gen = await plane.loaded(f.string("model") or "")
    params = read_sampling(p, SAMPLING, gen.info.max_stop_sequences)
    request = GenerateRequest(sampling=params, stream=f.boolean("stream", False))
    prompt_of(doc, request)
    want_details = p.boolean("details", False)
    seed = params.seed if params.temperature > 0 else None
    generation = await plane.generate(FAMILY, mv, gen, request, split)
    if request.stream:
        return streamed(MindieFramer(want_details, seed), generation, SSE)
    (done,) = await generation.collect()
    body: dict[str, Any] = {"generated_text": done.text}
    if want_details:
        body["details"] = details(done, seed, with_ids=True)
    return json_response(body)


ENDPOINTS = [
    Endpoint("POST", "/infer", infer, "inputs"),  # or "input_id" (recompute.py)
    Endpoint("POST", "/infer_token", infer, "inputs"),
]


class MindieFramer:
    """One event per token with its prefill or decode time; the last one carries the text."""

    def __init__(self, want_details: bool, seed: int | None) -> None:
        self.want_details, self.seed = want_details, seed
        self.gathered = Completion(0)
        self.last = time.perf_counter()

    def head(self) -> bytes:
        return b""

    def seen(self, delta: GenerateDelta) -> None:
        self.gathered.add(delta)
        self.last = time.perf_counter()

    def chunk(self, delta: GenerateDelta) -> bytes:
        gathered = self.gathered
        gathered.add(delta)
        now = time.perf_counter()
        ms = round((now - self.last) * 1000.0, 3)
        first = len(gathered.token_ids) == len(delta.token_ids)
        timing = {"prefill_time": ms if first else None, "decode_time": None if first else ms}
        self.last = now
        token_id = delta.token_ids[-1]
        if delta.finish_reason is None:
            return sse({**timing, "token": {"id": token_id, "text": delta.text}})
        end = details(gathered, self.seed, with_ids=False) if self.want_details else None
        return sse(
            {
                **timing,
                "generated_text": gathered.text,
                "details": end,
                "token": {"id": token_id, "text": None},
            }
        )

    def tail(self) -> bytes:
        return b""

    def error(self, exc: ServingError) -> bytes:
        return stream_error(exc, b"")
