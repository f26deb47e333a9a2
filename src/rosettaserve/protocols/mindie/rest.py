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
from collections.abc import AsyncIterator
from typing import Any

import orjson

from rosettaserve.core.dataplane import DataPlane
from rosettaserve.core.errors import InvalidInput, ServingError
from rosettaserve.core.generate import (
    Completion,
    Fields,
    GenerateDelta,
    GenerateRequest,
    collect,
    find_generator,
    json_object,
    tracked,
)
from rosettaserve.protocols.tgi.schema import inputs_text, sampling
from rosettaserve.protocols.vllm.rest import error_response
from rosettaserve.transport.routing import HttpRequest, HttpResponse, Route, json_response

DEFAULT_MAX_NEW_TOKENS = 20  # MindIE's default


def sse(doc: Any) -> bytes:
    return b"data: " + orjson.dumps(doc) + b"\n\n"


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
    if not all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in ids):
        raise InvalidInput("Parameter input_id must be integer")
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


def routes(dp: DataPlane) -> list[Route]:
    async def infer(req: HttpRequest) -> HttpResponse:
        doc = json_object(req.body)
        f = Fields(doc)
        p = f.object("parameters")
        mv, gen = find_generator(dp.registry, f.string("model") or "")
        params = sampling(p, DEFAULT_MAX_NEW_TOKENS, gen.info.max_stop_sequences)
        params.include_stop_str_in_output = False
        request = GenerateRequest(sampling=params, stream=f.boolean("stream", False))
        prompt_of(doc, request)
        want_details = p.boolean("details", False)
        seed = params.seed if params.temperature > 0 else None
        deltas = tracked(mv, gen.generate(request))
        if request.stream:
            events = event_stream(deltas, want_details, seed)
            return HttpResponse(200, content_type="text/event-stream", stream=events)
        (done,) = await collect(deltas)
        body: dict[str, Any] = {"generated_text": done.text}
        if want_details:
            body["details"] = details(done, seed, with_ids=True)
        return json_response(body)

    return [
        Route("POST", "/infer", infer, error_response),
        Route("POST", "/infer_token", infer, error_response),
    ]


async def event_stream(
    deltas: AsyncIterator[GenerateDelta], want_details: bool, seed: int | None
) -> AsyncIterator[bytes]:
    gathered = Completion(0)
    last = time.perf_counter()
    try:
        async for delta in deltas:
            gathered.add(delta)
            now = time.perf_counter()
            ms = round((now - last) * 1000.0, 3)
            first = len(gathered.token_ids) == len(delta.token_ids)
            timing = {"prefill_time": ms if first else None, "decode_time": None if first else ms}
            last = now
            token_id = delta.token_ids[-1]
            if delta.finish_reason is None:
                yield sse({**timing, "token": {"id": token_id, "text": delta.text}})
                continue
            end = details(gathered, seed, with_ids=False) if want_details else None
            yield sse(
                {
                    **timing,
                    "generated_text": gathered.text,
                    "details": end,
                    "token": {"id": token_id, "text": None},
                }
            )
    except ServingError as exc:
        yield sse({"error": exc.message, "error_type": "Incomplete Generation"})
