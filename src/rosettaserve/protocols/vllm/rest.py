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

from collections.abc import AsyncIterator
from typing import Any

import orjson

from rosettaserve.core.dataplane import DataPlane
from rosettaserve.core.errors import InvalidInput, ServingError
from rosettaserve.core.generate import (
    SEED_MAX,
    Fields,
    GenerateDelta,
    GenerateRequest,
    SamplingParams,
    collect,
    find_generator,
    tracked,
)
from rosettaserve.transport.routing import HttpResponse, json_response

DEFAULT_MAX_TOKENS = 16  # vLLM's SamplingParams default
ACCEPTED = {
    "prompt", "stream", "model", "n", "best_of", "temperature", "top_p", "top_k", "min_p",
    "presence_penalty", "frequency_penalty", "repetition_penalty", "max_tokens", "min_tokens",
    "stop", "stop_token_ids", "ignore_eos", "seed", "logprobs", "prompt_logprobs",
    "skip_special_tokens", "include_stop_str_in_output", "spaces_between_special_tokens",
}  # fmt: skip
# MindIE's error_type names (HttpRestResource::WrapperJson), the shape its vLLM route answers
ERROR_TYPES = {
    400: "Bad Request",
    404: "NotFoundError",
    422: "Input Validation Error",
    429: "Too Many Requests",
    500: "Incomplete Generation",
    503: "Service Unavailable",
}


def error_response(exc: ServingError) -> HttpResponse:
    kind = ERROR_TYPES.get(exc.http_status, "Bad Request")
    return json_response({"error": exc.message, "error_type": kind}, exc.http_status, exc.headers)


def sampling(f: Fields, max_n: int, max_stop: int) -> tuple[SamplingParams, int]:
    unknown = sorted(set(f.doc) - ACCEPTED)
    if unknown:
        raise InvalidInput(f"SamplingParams got an unexpected keyword argument '{unknown[0]}'")
    n = f.integer("n", 1, 1, max_n) or 1
    if (f.integer("best_of", n, 1) or n) != n:
        raise InvalidInput("'best_of' different from 'n' is not supported by this server")
    if f.number("min_p", 0.0, 0.0, 1.0) or f.integer("min_tokens", 0, 0):
        raise InvalidInput("'min_p' and 'min_tokens' are not supported by this server")
    temperature = f.number("temperature", 1.0, 0.0, 100.0)
    params = SamplingParams(
        max_new_tokens=f.integer("max_tokens", DEFAULT_MAX_TOKENS, 1),
        temperature=0.0 if (temperature or 0.0) < 1e-5 else float(temperature or 0.0),
        top_p=f.number("top_p", 1.0, 0.0, 1.0, lo_open=True) or 1.0,
        top_k=max(0, f.integer("top_k", 0, -1) or 0),
        seed=f.integer("seed", None, 0, SEED_MAX),
        repetition_penalty=f.number("repetition_penalty", 1.0, 0.0, 100.0, lo_open=True) or 1.0,
        presence_penalty=f.number("presence_penalty", 0.0, -2.0, 2.0) or 0.0,
        frequency_penalty=f.number("frequency_penalty", 0.0, -2.0, 2.0) or 0.0,
        stop=f.strings("stop", max_stop),
        stop_token_ids=f.token_ids("stop_token_ids"),
        ignore_eos=f.boolean("ignore_eos", False),
        skip_special_tokens=f.boolean("skip_special_tokens", True),
        include_stop_str_in_output=f.boolean("include_stop_str_in_output", False),
    )
    f.integer("logprobs", None, 0)  # accepted, as vLLM does; the simple API never returns them
    return params, n


async def generate(dp: DataPlane, doc: dict[str, Any]) -> HttpResponse:
    try:
        return await _generate(dp, doc)
    except ServingError as exc:
        return error_response(exc)


async def _generate(dp: DataPlane, doc: dict[str, Any]) -> HttpResponse:
    f = Fields(doc)
    prompt = f.string("prompt")
    if not prompt:
        raise InvalidInput("'prompt' must be a non-empty string")
    mv, gen = find_generator(dp.registry, f.string("model") or "")
    params, n = sampling(f, gen.info.max_n, gen.info.max_stop_sequences)
    request = GenerateRequest(
        prompt=prompt, sampling=params, n=n, stream=f.boolean("stream", False)
    )
    mindie = str(gen.info.options.get("vllm_stream_format", "vllm")) == "mindie"
    deltas = tracked(mv, gen.generate(request))
    if request.stream:
        body = (delta_chunks if mindie else cumulative_chunks)(prompt, n, deltas)
        media = "application/octet-stream" if mindie else "application/x-ndjson"
        return HttpResponse(200, content_type=media, stream=body)
    done = await collect(deltas, n)
    joint = " " if mindie else ""
    return json_response({"text": [prompt + joint + c.text for c in done]})


async def cumulative_chunks(
    prompt: str, n: int, deltas: AsyncIterator[GenerateDelta]
) -> AsyncIterator[bytes]:
    texts = [prompt] * n
    try:
        async for delta in deltas:
            texts[delta.index] += delta.text
            if delta.text or delta.finish_reason is not None:
                yield orjson.dumps({"text": texts}) + b"\n"
    except ServingError as exc:
        yield orjson.dumps({"error": exc.message}) + b"\n"


async def delta_chunks(
    prompt: str, n: int, deltas: AsyncIterator[GenerateDelta]
) -> AsyncIterator[bytes]:
    try:
        async for delta in deltas:
            if delta.text or delta.finish_reason is not None:
                texts = [""] * n
                texts[delta.index] = delta.text
                yield orjson.dumps({"text": texts}) + b"\0"
    except ServingError as exc:
        yield orjson.dumps({"error": exc.message}) + b"\0"
