"""Triton's generate extension: ``POST /v2/models/{m}[/versions/{v}]/generate`` (one JSON reply)
and ``.../generate_stream`` (``data:{json}\\n\\n`` events, no space after the colon).

Request: ``{"text_input": str, "id"?: str, "parameters"?: {...}}``; other top-level keys are
parameters too, as Triton passes them on (``max_tokens``, ``stop_words``, ``stream``,
``bad_words`` of the TensorRT-LLM ensemble). Keys this engine has no use for are ignored.
Errors are ``{"error": "<message>"}``; after a stream began, an ``error`` event.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import orjson

from rosettaserve.core.errors import InvalidInput, ServingError
from rosettaserve.core.generate import Fields, GenerateDelta, GenerateRequest, json_object
from rosettaserve.core.generation_plane import GenerationPlane, Split
from rosettaserve.core.sampling_fields import read_sampling
from rosettaserve.protocols.llm_http import Endpoint, streamed
from rosettaserve.protocols.tgi import schema as tgi_schema
from rosettaserve.protocols.tgi.schema import inputs_text
from rosettaserve.web.routing import HttpRequest, HttpResponse, json_response

FAMILY = "triton"
MODEL = r"/v2/models/(?P<model>[^/]+)(?:/versions/(?P<version>[0-9]+))?"
DEFAULT_MAX_TOKENS = 20  # MindIE's default for this route
NOT_PARAMETERS = ("text_input", "id", "parameters", "stream", "bad_words", "model")
# TGI's parameters, under the names the TensorRT-LLM ensemble also uses
RENAMED = {"max_new_tokens": "max_tokens", "stop": "stop_words", "seed": "random_seed"}
SAMPLING = replace(
    tgi_schema.SAMPLING,
    fields=tuple(
        replace(f, keys=(*f.keys, RENAMED[f.target])) if f.target in RENAMED else f
        for f in tgi_schema.SAMPLING.fields
    ),
    default_max_new_tokens=DEFAULT_MAX_TOKENS,
    fixed={},
)


def error_response(exc: ServingError) -> HttpResponse:
    return json_response({"error": exc.message}, exc.http_status, exc.headers)


def stream_error(exc: ServingError, first: bytes) -> bytes:
    return sse({"error": exc.message})


def sse(doc: Any) -> bytes:
    return b"data:" + orjson.dumps(doc) + b"\n\n"


def parameters(doc: dict[str, Any]) -> dict[str, Any]:
    nested = doc.get("parameters")
    if nested is not None and not isinstance(nested, dict):
        raise InvalidInput("'parameters' must be an object")
    merged = {k: v for k, v in doc.items() if k not in NOT_PARAMETERS}
    merged.update(nested or {})
    for key in ("stop", "stop_words"):
        if merged.get(key) == "":  # the TensorRT-LLM ensemble sends empty stop words
            del merged[key]
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


async def run(
    plane: GenerationPlane, req: HttpRequest, split: Split | None, stream: bool
) -> HttpResponse:
    doc = json_object(req.body)
    text = inputs_text(doc, "text_input")
    mv, gen = await plane.loaded(req.params["model"], req.params.get("version", ""))
    p = Fields(parameters(doc), "parameters")
    params = read_sampling(p, SAMPLING, gen.info.max_stop_sequences)
    reply = Reply(doc, mv.name, mv.version, p.boolean("details", False))
    request = GenerateRequest(prompt=text, sampling=params, stream=stream)
    generation = await plane.generate(FAMILY, mv, gen, request, split)
    if stream:
        return streamed(TritonFramer(reply), generation, "text/event-stream; charset=utf-8")
    (done,) = await generation.collect()
    finish = done.finish_reason.value if done.finish_reason else None
    return json_response(reply.body(done.text, len(done.token_ids), finish))


async def generate(plane: GenerationPlane, req: HttpRequest, split: Split | None) -> HttpResponse:
    return await run(plane, req, split, stream=False)


async def generate_stream(
    plane: GenerationPlane, req: HttpRequest, split: Split | None
) -> HttpResponse:
    return await run(plane, req, split, stream=True)


ENDPOINTS = [
    Endpoint("POST", MODEL + "/generate", generate, "text_input"),
    Endpoint("POST", MODEL + "/generate_stream", generate_stream, "text_input"),
]


class TritonFramer:
    """``data:{json}`` events of the new text, with the tokens generated so far."""

    def __init__(self, reply: Reply) -> None:
        self.reply, self.tokens = reply, 0

    def head(self) -> bytes:
        return b""

    def seen(self, delta: GenerateDelta) -> None:
        self.tokens += len(delta.token_ids)

    def chunk(self, delta: GenerateDelta) -> bytes:
        self.seen(delta)
        if delta.text or delta.finish_reason is not None:
            finish = delta.finish_reason.value if delta.finish_reason else None
            return sse(self.reply.body(delta.text, self.tokens, finish))
        return b""

    def tail(self) -> bytes:
        return b""

    def error(self, exc: ServingError) -> bytes:
        return sse({"error": exc.message})
