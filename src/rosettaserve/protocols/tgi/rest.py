"""TGI routes: ``/generate``, ``/generate_stream``, ``/`` (what the text-generation client
calls), ``/info``, ``/health``.

``POST /generate`` is shared with vLLM's simple API, told apart by the body as MindIE does:
``prompt`` means vLLM, ``inputs`` means TGI.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from rosettaserve.core.dataplane import DataPlane
from rosettaserve.core.errors import InvalidInput, ServingError
from rosettaserve.core.generate import (
    Fields,
    GenerateDelta,
    TextGenerator,
    collect,
    find_generator,
    json_object,
    tracked,
)
from rosettaserve.protocols.tgi import convert
from rosettaserve.protocols.tgi.schema import TgiRequest, tgi_request
from rosettaserve.protocols.vllm import rest as vllm_rest
from rosettaserve.transport.routing import HttpRequest, HttpResponse, Route, json_response

SSE_HEADERS = {"cache-control": "no-cache", "x-accel-buffering": "no"}


def error_response(exc: ServingError) -> HttpResponse:
    return json_response(convert.error_doc(exc), exc.http_status, exc.headers)


def routes(dp: DataPlane) -> list[Route]:
    async def run(doc: dict[str, Any], stream: bool | None, as_list: bool) -> HttpResponse:
        mv, gen = find_generator(dp.registry, Fields(doc).string("model") or "")
        tgi = tgi_request(doc, gen.info.max_stop_sequences, stream)
        _truncate(gen, tgi)
        deltas = tracked(mv, gen.generate(tgi.generate))
        prefix = (tgi.generate.prompt or "") if tgi.return_full_text else ""
        if tgi.generate.stream:
            body = event_stream(tgi, deltas, prefix, gen.info.special_ids)
            return HttpResponse(
                200, content_type="text/event-stream", headers=SSE_HEADERS, stream=body
            )
        (done,) = await collect(deltas)
        prompt = _prefill(gen, tgi) if tgi.decoder_input_details else []
        doc = convert.generate_response(tgi, done, prefix, prompt, gen.info.special_ids)
        headers = {"x-prompt-tokens": str(done.usage.prompt_tokens if done.usage else 0)}
        headers["x-generated-tokens"] = str(len(done.token_ids))
        return json_response([doc] if as_list else doc, headers=headers)

    async def generate(req: HttpRequest) -> HttpResponse:
        doc = json_object(req.body)
        if "inputs" not in doc and "prompt" in doc:
            return await vllm_rest.generate(dp, doc)
        if "inputs" not in doc:
            raise InvalidInput(
                "`inputs` or `prompt` must be necessary: `inputs` for TGI, `prompt` for vLLM"
            )
        return await run(doc, False, as_list=False)

    async def generate_stream(req: HttpRequest) -> HttpResponse:
        return await run(json_object(req.body), True, as_list=False)

    async def compat(req: HttpRequest) -> HttpResponse:
        return await run(json_object(req.body), None, as_list=True)

    async def info(req: HttpRequest) -> HttpResponse:
        _, gen = find_generator(dp.registry)
        return json_response(convert.info(gen.info))

    async def health(req: HttpRequest) -> HttpResponse:
        try:
            find_generator(dp.registry)
        except ServingError:
            return json_response({"error": "unhealthy", "error_type": "healthcheck"}, 503)
        return HttpResponse(200, b"")

    return [
        Route("POST", "/generate", generate, error_response),
        Route("POST", "/generate_stream", generate_stream, error_response),
        Route("POST", "/", compat, error_response),
        Route("GET", "/info", info, error_response),
        Route("GET", "/health", health, error_response),
    ]


def _truncate(gen: TextGenerator, tgi: TgiRequest) -> None:
    if tgi.truncate is None:
        return
    ids = gen.tokenize(tgi.generate.prompt or "")
    if len(ids) > tgi.truncate:
        tgi.generate.prompt_token_ids = ids[-tgi.truncate :]


def _prefill(gen: TextGenerator, tgi: TgiRequest) -> list[tuple[int, str]]:
    ids = tgi.generate.prompt_token_ids or gen.tokenize(tgi.generate.prompt or "")
    return [(i, gen.decode([i])) for i in ids]


async def event_stream(
    tgi: TgiRequest, deltas: AsyncIterator[GenerateDelta], prefix: str, specials: frozenset[int]
) -> AsyncIterator[bytes]:
    text, index = prefix, 0
    try:
        async for delta in deltas:
            index += 1
            text += delta.text
            full = text if delta.finish_reason is not None else None
            yield convert.stream_event(tgi, index, delta, full, specials)
    except ServingError as exc:
        yield convert.sse(convert.error_doc(exc))
