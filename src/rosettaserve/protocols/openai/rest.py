"""OpenAI-compatible routes: /v1/chat/completions, /v1/completions, /v1/models.

``GET /v1/models/{id}`` is shared with TF Serving's model status: its one body answers both
clients (protocols/tfserving/rest.py, with ``convert.model_card`` from here).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from rosettaserve.core import embedding
from rosettaserve.core.errors import ServingError
from rosettaserve.core.generate import GenerateDelta, TextGenerator, Usage, json_object, total_usage
from rosettaserve.core.generation_plane import (
    GenerationPlane,
    Split,
    chat_prompt,
    reply_identity,
)
from rosettaserve.core.registry import ModelVersion
from rosettaserve.protocols.llm_http import SSE_HEADERS, Endpoint, streamed
from rosettaserve.protocols.openai import convert, schema, tools
from rosettaserve.protocols.openai.convert import Reply
from rosettaserve.protocols.tools.choice import ToolPlan, tool_plan
from rosettaserve.web.routing import HttpRequest, HttpResponse, json_response

FAMILY = "openai"


def error_response(exc: ServingError) -> HttpResponse:
    return json_response(convert.error_doc(exc), exc.http_status, exc.headers)


def stream_error(exc: ServingError, first: bytes) -> bytes:
    """The last chunk of a stream that failed after it began."""
    return convert.sse(convert.error_doc(exc)) + convert.DONE


async def chat(plane: GenerationPlane, req: HttpRequest, split: Split | None) -> HttpResponse:
    doc = json_object(req.body)
    mv, gen = await plane.loaded(schema.model_name(doc))
    info = gen.info
    trusted = plane.trust_request_chat_template
    oa, messages = schema.chat_request(doc, info.max_n, info.max_stop_sequences, trusted)
    plan = chat_tool_plan(oa, info.options, mv.name)
    oa.generate.prompt = await chat_prompt(gen, messages, len(req.body), oa.chat)
    reply = Reply("chat", mv.name, *reply_identity(split, "chatcmpl"))
    oa.generate.request_id = reply.id
    generation = await plane.generate(FAMILY, mv, gen, oa.generate, split)
    if oa.generate.stream:
        return streamed(ChatFramer(reply, oa, plan), generation, headers=SSE_HEADERS)
    done = await generation.collect()
    body = convert.chat_completion(reply, done, total_usage(done), oa.top_logprobs is not None)
    if plan is not None and plan.parser is not None:
        tools.answer_choices(body, done, plan, oa.tools is not None and oa.tools.legacy)
    return json_response(body)


def chat_tool_plan(oa: schema.OpenAIRequest, options: Any, model: str) -> ToolPlan | None:
    """The request's tools: offered through the template, and how they are chosen."""
    if oa.tools is None or not oa.tools.specs:
        return None
    plan = tool_plan(oa.tools.specs, oa.tools.choice, options, model)
    plan.apply(oa.generate.sampling)
    if plan.offered and oa.chat is not None:
        oa.chat = replace(oa.chat, tools=oa.tools.wire)
    return plan


async def completions(
    plane: GenerationPlane, req: HttpRequest, split: Split | None
) -> HttpResponse:
    doc = json_object(req.body)
    mv, gen = await plane.loaded(schema.model_name(doc))
    oa = schema.completion_request(doc, gen.info.max_n, gen.info.max_stop_sequences)
    reply = Reply("text", mv.name, *reply_identity(split, "cmpl"))
    oa.generate.request_id = reply.id
    generation = await plane.generate(FAMILY, mv, gen, oa.generate, split)
    echo = _echo(gen, oa) if oa.echo else ""  # (after the plane checked the prompt's length)
    if oa.generate.stream:
        return streamed(TextFramer(reply, oa, echo), generation, headers=SSE_HEADERS)
    done = await generation.collect()
    logprobs = oa.top_logprobs is not None
    return json_response(convert.text_completion(reply, done, total_usage(done), logprobs, echo))


async def models(plane: GenerationPlane, req: HttpRequest, split: Split | None) -> HttpResponse:
    cards = [_card(mv, gen) for mv, gen in plane.generators()]
    cards += [
        convert.model_card(mv.name, info.created, info.max_tokens)
        for mv, info in embedding.served(plane.dataplane)
    ]
    return json_response({"object": "list", "data": cards})


ENDPOINTS = [
    Endpoint("POST", "/v1/chat/completions", chat, "messages"),
    Endpoint("POST", "/v1/completions", completions, "prompt"),
    Endpoint("GET", "/v1/models", models),
]


def _card(mv: ModelVersion, gen: TextGenerator) -> dict[str, object]:
    return convert.model_card(mv.name, gen.info.created, gen.info.max_model_len)


def _echo(gen: TextGenerator, oa: schema.OpenAIRequest) -> str:
    request = oa.generate
    return (
        request.prompt if request.prompt is not None else gen.decode(request.prompt_token_ids or [])
    )


class ChatFramer:
    """chat.completion.chunk events: the role first, then the content, then usage and [DONE]."""

    def __init__(
        self, reply: Reply, oa: schema.OpenAIRequest, plan: ToolPlan | None = None
    ) -> None:
        self.reply, self.n = reply, oa.generate.n
        self.logprobs, self.with_usage = oa.top_logprobs is not None, oa.include_usage
        self.usages: dict[int, Usage] = {}
        self.calls = tools.ToolDeltas(plan) if plan is not None and plan.parser else None
        self.legacy = oa.tools is not None and oa.tools.legacy  # answered as function_call

    def head(self) -> bytes:
        roles = [convert.chat_role_choice(i) for i in range(self.n)]
        return convert.chat_chunk(self.reply, roles, self.with_usage)

    def seen(self, delta: GenerateDelta) -> None:
        if delta.usage is not None:
            self.usages[delta.index] = delta.usage
        if self.calls is not None:
            self.calls.feed(delta)

    def chunk(self, delta: GenerateDelta) -> bytes:
        if self.calls is not None:
            return self._tool_chunk(delta)
        self.seen(delta)
        if delta.text or delta.finish_reason is not None or self.logprobs:
            choice = convert.chat_delta_choice(delta, self.logprobs)
            return convert.chat_chunk(self.reply, [choice], self.with_usage)
        return b""

    def _tool_chunk(self, delta: GenerateDelta) -> bytes:
        """The delta read by the tool parser: its content and its call pieces."""
        assert self.calls is not None
        if delta.usage is not None:
            self.usages[delta.index] = delta.usage
        content, calls, called = self.calls.feed(delta)
        pieces = tools.delta_calls(calls, self.legacy)
        if not (content or pieces or delta.finish_reason is not None or self.logprobs):
            return b""
        choice = convert.chat_delta_choice(replace(delta, text=content), self.logprobs)
        choice["delta"] |= pieces
        if called and delta.finish_reason is not None:
            choice["finish_reason"] = "function_call" if self.legacy else "tool_calls"
        return convert.chat_chunk(self.reply, [choice], self.with_usage)

    def tail(self) -> bytes:
        if not self.with_usage:
            return convert.DONE
        return convert.usage_chunk(self.reply, "chat.completion.chunk", _sum(self.usages)) + (
            convert.DONE
        )

    def error(self, exc: ServingError) -> bytes:
        return stream_error(exc, b"")


class TextFramer:
    """text_completion events: the echo before a choice's first text, then usage and [DONE]."""

    def __init__(self, reply: Reply, oa: schema.OpenAIRequest, echo: str) -> None:
        self.reply, self.echo = reply, echo
        self.logprobs, self.with_usage = oa.top_logprobs is not None, oa.include_usage
        self.usages: dict[int, Usage] = {}
        self.offsets: dict[int, int] = {}  # text sent so far per choice; absent: echo still due

    def head(self) -> bytes:
        return b""

    def _advance(self, delta: GenerateDelta) -> tuple[str, int] | None:
        """The echo due before this delta's text and its offset (None: it makes no chunk)."""
        if delta.usage is not None:
            self.usages[delta.index] = delta.usage
        if not (delta.text or delta.finish_reason is not None or self.logprobs):
            return None
        prefix = "" if delta.index in self.offsets else self.echo
        offset = self.offsets.get(delta.index, 0) + len(prefix)
        self.offsets[delta.index] = offset + len(delta.text)
        return prefix, offset

    def seen(self, delta: GenerateDelta) -> None:
        self._advance(delta)

    def chunk(self, delta: GenerateDelta) -> bytes:
        at = self._advance(delta)
        if at is None:
            return b""
        prefix, offset = at
        return convert.text_chunk(
            self.reply,
            delta,
            self.logprobs,
            prefix=prefix,
            offset=offset,
            include_usage=self.with_usage,
        )

    def tail(self) -> bytes:
        if not self.with_usage:
            return convert.DONE
        return convert.usage_chunk(self.reply, "text_completion", _sum(self.usages)) + convert.DONE

    def error(self, exc: ServingError) -> bytes:
        return stream_error(exc, b"")


def _sum(usages: dict[int, Usage]) -> Usage:
    prompt = next(iter(usages.values())).prompt_tokens if usages else 0
    return Usage(prompt, sum(u.completion_tokens for u in usages.values()))
