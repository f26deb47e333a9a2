"""OpenAI-compatible routes: /v1/chat/completions, /v1/completions, /v1/models.

``GET /v1/models/{id}`` is not served: TF Serving's model status owns that path on this port.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from rosettaserve.core.dataplane import DataPlane
from rosettaserve.core.errors import ServingError
from rosettaserve.core.generate import (
    GenerateDelta,
    TextGenerator,
    Usage,
    collect,
    find_generator,
    generators,
    json_object,
    total_usage,
    tracked,
)
from rosettaserve.core.registry import ModelVersion
from rosettaserve.protocols.openai import convert, schema
from rosettaserve.protocols.openai.convert import Reply
from rosettaserve.transport.routing import HttpRequest, HttpResponse, Route, json_response

SSE = "text/event-stream"
SSE_HEADERS = {"cache-control": "no-cache", "x-accel-buffering": "no"}


def error_response(exc: ServingError) -> HttpResponse:
    return json_response(convert.error_doc(exc), exc.http_status, exc.headers)


def routes(dp: DataPlane) -> list[Route]:
    async def chat(req: HttpRequest) -> HttpResponse:
        doc = json_object(req.body)
        mv, gen = find_generator(dp.registry, schema.model_name(doc))
        info = gen.info
        oa, messages = schema.chat_request(doc, info.max_n, info.max_stop_sequences)
        oa.generate.prompt = gen.chat_prompt(messages)
        oa.generate.add_special_tokens = False
        oa.generate.request_id = (reply := Reply("chat", mv.name)).id
        stream = tracked(mv, gen.generate(oa.generate))
        if oa.generate.stream:
            return HttpResponse(
                200, content_type=SSE, headers=SSE_HEADERS, stream=chat_stream(reply, oa, stream)
            )
        done = await collect(stream, oa.generate.n)
        body = convert.chat_completion(reply, done, total_usage(done), oa.top_logprobs is not None)
        return json_response(body)

    async def completions(req: HttpRequest) -> HttpResponse:
        doc = json_object(req.body)
        mv, gen = find_generator(dp.registry, schema.model_name(doc))
        oa = schema.completion_request(doc, gen.info.max_n, gen.info.max_stop_sequences)
        oa.generate.request_id = (reply := Reply("text", mv.name)).id
        stream = tracked(mv, gen.generate(oa.generate))
        echo = _echo(gen, oa) if oa.echo else ""
        if oa.generate.stream:
            body = text_stream(reply, oa, stream, echo)
            return HttpResponse(200, content_type=SSE, headers=SSE_HEADERS, stream=body)
        done = await collect(stream, oa.generate.n)
        doc = convert.text_completion(
            reply, done, total_usage(done), oa.top_logprobs is not None, echo
        )
        return json_response(doc)

    async def models(req: HttpRequest) -> HttpResponse:
        cards = [_card(mv, gen) for mv, gen in generators(dp.registry)]
        return json_response({"object": "list", "data": cards})

    return [
        Route("POST", "/v1/chat/completions", chat, error_response),
        Route("POST", "/v1/completions", completions, error_response),
        Route("GET", "/v1/models", models, error_response),
    ]


def _card(mv: ModelVersion, gen: TextGenerator) -> dict[str, object]:
    return convert.model_card(mv.name, gen.info.created, gen.info.max_model_len)


def _echo(gen: TextGenerator, oa: schema.OpenAIRequest) -> str:
    request = oa.generate
    return (
        request.prompt if request.prompt is not None else gen.decode(request.prompt_token_ids or [])
    )


async def chat_stream(
    reply: Reply, oa: schema.OpenAIRequest, stream: AsyncIterator[GenerateDelta]
) -> AsyncIterator[bytes]:
    logprobs, with_usage = oa.top_logprobs is not None, oa.include_usage
    usages: dict[int, Usage] = {}
    try:
        n = oa.generate.n
        yield convert.chat_chunk(reply, [convert.chat_role_choice(i) for i in range(n)], with_usage)
        async for delta in stream:
            if delta.text or delta.finish_reason is not None or logprobs:
                choice = convert.chat_delta_choice(delta, logprobs)
                yield convert.chat_chunk(reply, [choice], with_usage)
            if delta.usage is not None:
                usages[delta.index] = delta.usage
        if with_usage:
            yield convert.usage_chunk(reply, "chat.completion.chunk", _sum(usages))
    except ServingError as exc:
        yield convert.sse(convert.error_doc(exc))
    yield convert.DONE


async def text_stream(
    reply: Reply, oa: schema.OpenAIRequest, stream: AsyncIterator[GenerateDelta], echo: str
) -> AsyncIterator[bytes]:
    logprobs, with_usage = oa.top_logprobs is not None, oa.include_usage
    usages: dict[int, Usage] = {}
    offsets: dict[int, int] = {}  # text sent so far per choice; absent: the echo is still due
    try:
        async for delta in stream:
            if delta.text or delta.finish_reason is not None or logprobs:
                prefix = "" if delta.index in offsets else echo
                offset = offsets.get(delta.index, 0) + len(prefix)
                yield convert.text_chunk(
                    reply, delta, logprobs, prefix=prefix, offset=offset, include_usage=with_usage
                )
                offsets[delta.index] = offset + len(delta.text)
            if delta.usage is not None:
                usages[delta.index] = delta.usage
        if with_usage:
            yield convert.usage_chunk(reply, "text_completion", _sum(usages))
    except ServingError as exc:
        yield convert.sse(convert.error_doc(exc))
    yield convert.DONE


def _sum(usages: dict[int, Usage]) -> Usage:
    prompt = next(iter(usages.values())).prompt_tokens if usages else 0
    return Usage(prompt, sum(u.completion_tokens for u in usages.values()))
