"""vLLM's simple API server (``vllm/entrypoints/api_server.py``): ``POST /generate`` with a
``prompt``; every other key is a ``SamplingParams`` argument.

The route itself is TGI's ``/generate`` (see protocols/tgi/rest.py), which hands bodies with
``prompt`` here. Two stream framings, chosen by the model parameter ``vllm_stream_format``:
  - ``vllm`` (default, current vLLM): ``{"text": [prompt + output so far]}`` + ``\\n`` per chunk;
    the non-streaming text is the prompt followed by the output;
  - ``mindie`` (vLLM 0.2.x, as MindIE serves it): ``{"text": [new text]}`` + ``\\0`` per chunk;
    the non-streaming text is the prompt, a space, the output.
"""

from __future__ import annotations

from typing import Any

import orjson

from rosettaserve.core.errors import InvalidInput, ServingError
from rosettaserve.core.generate import Fields, GenerateDelta, GenerateRequest, SamplingParams
from rosettaserve.core.generation_plane import GenerationPlane, Split
from rosettaserve.core.sampling_fields import (
    NOT_BUILT_EXTRAS,
    PENALTIES,
    STOPS,
    Field,
    SamplingTable,
    read_sampling,
    refuse_unspaced_special_tokens,
)
from rosettaserve.core.structured_output import VLLM_FORMS, read_constraint
from rosettaserve.protocols.llm_http import streamed
from rosettaserve.web.routing import HttpResponse, json_response

FAMILY = "vllm"
DEFAULT_MAX_TOKENS = 16  # vLLM's SamplingParams default
MAX_LOGPROBS = 20  # vLLM's default max_logprobs
ACCEPTED = {
    "prompt", "stream", "model", "n", "best_of", "temperature", "top_p", "top_k", "min_p",
    "presence_penalty", "frequency_penalty", "repetition_penalty", "max_tokens", "min_tokens",
    "stop", "stop_token_ids", "ignore_eos", "seed", "logprobs", "prompt_logprobs",
    "skip_special_tokens", "include_stop_str_in_output", "spaces_between_special_tokens",
    *(form.key for form in VLLM_FORMS),
}  # fmt: skip
SAMPLING = SamplingTable(
    fields=(
        Field("max_new_tokens", ("max_tokens",), "int", 1),
        Field("temperature", ("temperature",), "number", 0.0, 100.0),
        Field("top_p", ("top_p",), "number", 0.0, 1.0, lo_open=True),
        Field("top_k", ("top_k",), "int", -1),
        *PENALTIES,
        *STOPS,
    ),
    refused=NOT_BUILT_EXTRAS,
    max_tokens=DEFAULT_MAX_TOKENS,
)
# MindIE's error_type names (HttpRestResource::WrapperJson), the shape its vLLM route answers
ERROR_TYPES = {
    400: "Bad Request",
    404: "NotFoundError",
    422: "Input Validation Error",
    429: "Too Many Requests",
    500: "Incomplete Generation",
    503: "Service Unavailable",
    504: "Incomplete Generation",  # the request timeout stopped the generation
}


def error_response(exc: ServingError) -> HttpResponse:
    kind = ERROR_TYPES.get(exc.http_status, "Bad Request")
    return json_response({"error": exc.message, "error_type": kind}, exc.http_status, exc.headers)


def stream_error(exc: ServingError, first: bytes) -> bytes:
    """The error chunk, in the framing the stream began with (``\\0`` or ``\\n``)."""
    return orjson.dumps({"error": exc.message}) + (b"\0" if first.endswith(b"\0") else b"\n")


def stream_content_type(first: bytes) -> str:
    return "application/octet-stream" if first.endswith(b"\0") else "application/x-ndjson"


def sampling(f: Fields, max_n: int, max_stop: int) -> tuple[SamplingParams, int]:
    unknown = sorted(set(f.doc) - ACCEPTED)
    if unknown:
        raise InvalidInput(f"SamplingParams got an unexpected keyword argument '{unknown[0]}'")
    n = f.integer("n", 1, 1, max_n) or 1
    if (f.integer("best_of", n, 1) or n) != n:
        raise InvalidInput("'best_of' different from 'n' is not supported by this server")
    params = read_sampling(f, SAMPLING, max_stop)
    refuse_unspaced_special_tokens(f, params)
    f.integer("logprobs", None, 0, MAX_LOGPROBS)  # accepted: the simple API never returns them
    # asked of the engine (which computes them, as vLLM does, or refuses), never returned either
    params.prompt_logprobs = f.integer("prompt_logprobs", None, 0, MAX_LOGPROBS)
    params.constraint = read_constraint(f.doc, VLLM_FORMS)
    return params, n


async def generate(
    plane: GenerationPlane, doc: dict[str, Any], split: Split | None
) -> HttpResponse:
    try:
        return await _generate(plane, doc, split)
    except ServingError as exc:
        return error_response(exc)


async def _generate(
    plane: GenerationPlane, doc: dict[str, Any], split: Split | None
) -> HttpResponse:
    f = Fields(doc)
    prompt = f.string("prompt")
    if not prompt:
        raise InvalidInput("'prompt' must be a non-empty string")
    mv, gen = await plane.loaded(f.string("model") or "")
    params, n = sampling(f, gen.info.max_n, gen.info.max_stop_sequences)
    request = GenerateRequest(
        prompt=prompt, sampling=params, n=n, stream=f.boolean("stream", False)
    )
    mindie = str(gen.info.options.get("vllm_stream_format", "vllm")) == "mindie"
    generation = await plane.generate(FAMILY, mv, gen, request, split)
    if request.stream:
        framer = DeltaFramer(n) if mindie else CumulativeFramer(prompt, n)
        media = "application/octet-stream" if mindie else "application/x-ndjson"
        return streamed(framer, generation, media)
    done = await generation.collect()
    joint = " " if mindie else ""
    return json_response({"text": [prompt + joint + c.text for c in done]})


class CumulativeFramer:
    """Current vLLM: every chunk holds each sequence's prompt and output so far, + ``\\n``."""

    def __init__(self, prompt: str, n: int) -> None:
        self.texts = [prompt] * n

    def head(self) -> bytes:
        return b""

    def seen(self, delta: GenerateDelta) -> None:
        self.texts[delta.index] += delta.text

    def chunk(self, delta: GenerateDelta) -> bytes:
        self.seen(delta)
        if delta.text or delta.finish_reason is not None:
            return orjson.dumps({"text": self.texts}) + b"\n"
        return b""

    def tail(self) -> bytes:
        return b""

    def error(self, exc: ServingError) -> bytes:
        return orjson.dumps({"error": exc.message}) + b"\n"


class DeltaFramer:
    """vLLM 0.2.x as MindIE serves it: each chunk holds the new text only, + ``\\0``."""

    def __init__(self, n: int) -> None:
        self.n = n

    def head(self) -> bytes:
        return b""

    def seen(self, delta: GenerateDelta) -> None:
        return None

    def chunk(self, delta: GenerateDelta) -> bytes:
        if delta.text or delta.finish_reason is not None:
            texts = [""] * self.n
            texts[delta.index] = delta.text
            return orjson.dumps({"text": texts}) + b"\0"
        return b""

    def tail(self) -> bytes:
        return b""

    def error(self, exc: ServingError) -> bytes:
        return orjson.dumps({"error": exc.message}) + b"\0"
