"""Triton's generate extension: ``POST /v2/models/{m}[/versions/{v}]/generate`` (one JSON reply)
and ``.../generate_stream`` (``data:{json}\\n\\n`` events, no space after the colon).

Request: ``{"text_input": str, "id"?: str, "parameters"?: {...}}``; other top-level keys are
parameters too, as Triton passes them on (``max_tokens``, ``stop_words``, ``stream``,
``bad_words`` of the TensorRT-LLM ensemble). Keys this engine has no use for are ignored.
Errors are ``{"error": "<message>"}``; after a stream began, an ``error`` event.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import orjson

from rosettaserve.core.dataplane import DataPlane
from rosettaserve.core.errors import InvalidInput, ServingError
from rosettaserve.core.generate import (
    Fields,
    GenerateDelta,
    GenerateRequest,
    collect,
    find_generator,
    json_object,
    tracked,
)
from rosettaserve.protocols.tgi.schema import inputs_text, sampling
from rosettaserve.transport.routing import HttpRequest, HttpResponse, Route, json_response

MODEL = r"/v2/models/(?P<model>[^/]+)(?:/versions/(?P<version>[0-9]+))?"
DEFAULT_MAX_TOKENS = 20  # MindIE's default for this route
RENAMED = {"max_tokens": "max_new_tokens", "stop_words": "stop", "random_seed": "seed"}
NOT_PARAMETERS = ("text_input", "id", "parameters", "stream", "bad_words", "model")


def error_response(exc: ServingError) -> HttpResponse:
    return json_response({"error": exc.message}, exc.http_status, exc.headers)


def sse(doc: Any) -> bytes:
    return b"data:" + orjson.dumps(doc) + b"\n\n"


def parameters(doc: dict[str, Any]) -> dict[str, Any]:
    nested = doc.get("parameters")
    if nested is not None and not isinstance(nested, dict):
        raise InvalidInput("'parameters' must be an object")
    merged = {k: v for k, v in doc.items() if k not in NOT_PARAMETERS}
    merged.update(nested or {})
    for old, new in RENAMED.items():
        if old in merged and new not in merged:
            merged[new] = merged.pop(old)
    if merged.get("stop") == "":  # the TensorRT-LLM ensemble sends empty stop words
        del merged["stop"]
    return merged


class Reply:
    def __init__(self, doc: dict[str, Any], name: str, version: str, details: bool) -> None:
        request_id = doc.get("id")
        if request_id is not None and not isinstance(request_id, str):
            raise InvalidInput("'id' must be a string")
        self.head: dict[str, Any] = {} if request_id is None else {"id": request_id}
        self.head |= {"model_name": name, "model_version": version}
        self.details = details

    def body(self, text: str, tokens: int, finish: str | None) -> dict[str, Any]:
        doc = {**self.head, "text_output": text}
        if self.details:
            doc["details"] = {
                "finish_reason": finish,
                "generated_tokens": tokens,
                "first_token_cost": None,
                "decode_cost": None,
                "batch_size": 1,
                "queue_wait_time": None,
            }
        return doc


def routes(dp: DataPlane) -> list[Route]:
    async def run(req: HttpRequest, stream: bool) -> HttpResponse:
        doc = json_object(req.body)
        text = inputs_text(doc, "text_input")
        mv, gen = find_generator(dp.registry, req.params["model"], req.params.get("version", ""))
        p = Fields(parameters(doc), "parameters")
        params = sampling(p, DEFAULT_MAX_TOKENS, gen.info.max_stop_sequences)
        params.include_stop_str_in_output = False
        reply = Reply(doc, mv.name, mv.version, p.boolean("details", False))
        deltas = tracked(
            mv, gen.generate(GenerateRequest(prompt=text, sampling=params, stream=stream))
        )
        if stream:
            events = event_stream(reply, deltas)
            return HttpResponse(200, content_type="text/event-stream; charset=utf-8", stream=events)
        (done,) = await collect(deltas)
        finish = done.finish_reason.value if done.finish_reason else None
        return json_response(reply.body(done.text, len(done.token_ids), finish))

    async def generate(req: HttpRequest) -> HttpResponse:
        return await run(req, stream=False)

    async def generate_stream(req: HttpRequest) -> HttpResponse:
        return await run(req, stream=True)

    return [
        Route("POST", MODEL + "/generate", generate, error_response),
        Route("POST", MODEL + "/generate_stream", generate_stream, error_response),
    ]


async def event_stream(reply: Reply, deltas: AsyncIterator[GenerateDelta]) -> AsyncIterator[bytes]:
    tokens = 0
    try:
        async for delta in deltas:
            tokens += len(delta.token_ids)
            if delta.text or delta.finish_reason is not None:
                finish = delta.finish_reason.value if delta.finish_reason else None
                yield sse(reply.body(delta.text, tokens, finish))
    except ServingError as exc:
        yield sse({"error": exc.message})
