"""Ollama's ``POST /api/generate`` and ``POST /api/chat``.

Streamed by default as NDJSON (``application/x-ndjson``): one ``{"model", "created_at",
"response" | "message", "done": false}`` line per delta, then the ``done: true`` line with
``done_reason`` (``stop``, ``length``; ``load`` for a request with nothing to generate) and the
counts and durations (nanoseconds; ``load_duration`` is 0: a served model is loaded already).
``context`` is not sent (nor read): a conversation goes on through ``/api/chat``. A chat's tool
calls come through the same tool plan as OpenAI chat's (``function.arguments`` an object), in
a stream as whole calls on one line before the last. Errors are ``{"error": message}``; a
stream that fails after it began ends with such a line.
"""

from __future__ import annotations

from datetime import UTC, datetime
from time import perf_counter_ns, time_ns
from typing import Any

import orjson

from rosettaserve.core.errors import ModelNotFound, Overloaded, ServingError
from rosettaserve.core.generate import (
    Completion,
    FinishReason,
    GenerateDelta,
    TextGenerator,
    Usage,
    json_object,
)
from rosettaserve.core.generation_plane import Generation, GenerationPlane, Split, chat_prompt
from rosettaserve.core.registry import KEEP_ALIVE, ModelVersion
from rosettaserve.protocols.llm_http import Endpoint, streamed
from rosettaserve.protocols.ollama import schema
from rosettaserve.protocols.openai.rest import chat_tool_plan
from rosettaserve.protocols.openai.tools import ToolDeltas
from rosettaserve.protocols.tools import CallDelta, extract
from rosettaserve.protocols.tools.choice import ToolPlan
from rosettaserve.web.routing import HttpRequest, HttpResponse, json_response

FAMILY = "ollama"
NDJSON = "application/x-ndjson"


def error_status(exc: ServingError) -> int:
    return 503 if isinstance(exc, Overloaded) else exc.http_status  # Ollama's "server busy"


def error_response(exc: ServingError) -> HttpResponse:
    return json_response({"error": exc.message}, error_status(exc), exc.headers)


def stream_error(exc: ServingError, first: bytes) -> bytes:
    return orjson.dumps({"error": exc.message}) + b"\n"


def stream_content_type(first: bytes) -> str:
    return NDJSON


_CLOCK: list[Any] = [-1, ""]  # (the millisecond, its RFC 3339 text): one format a millisecond


def now() -> str:
    """The time as Ollama's ``created_at`` (RFC 3339, UTC), to the millisecond: a stream's
    lines within one millisecond share it (formatting a time costs more than a line)."""
    ms = time_ns() // 1_000_000
    if ms != _CLOCK[0]:
        moment = datetime.fromtimestamp(ms / 1000, UTC)
        _CLOCK[:] = [ms, moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")]
    return str(_CLOCK[1])


async def find(plane: GenerationPlane, name: str) -> tuple[ModelVersion, TextGenerator]:
    """The model ``NAME`` or ``NAME:TAG``; a missing one answered in Ollama's words."""
    base, version = schema.split_name(name)
    try:
        return await plane.loaded(base, version)
    except ModelNotFound:
        raise ModelNotFound(f'model "{name}" not found, try pulling it first') from None


# -- the routes ----------------------------------------------------------------------------------


async def generate(plane: GenerationPlane, req: HttpRequest, split: Split | None) -> HttpResponse:
    return await _serve(plane, req, split, chat=False)


async def chat(plane: GenerationPlane, req: HttpRequest, split: Split | None) -> HttpResponse:
    return await _serve(plane, req, split, chat=True)


async def _serve(
    plane: GenerationPlane, req: HttpRequest, split: Split | None, chat: bool
) -> HttpResponse:
    start = perf_counter_ns()
    doc = json_object(req.body)
    name = schema.model_name(doc)
    mv, gen = await find(plane, name)
    keep_alive = schema.keep_alive_seconds(doc)  # this request's idle time, else model.yaml's
    if keep_alive is None:
        mv.extra.pop(KEEP_ALIVE, None)
    else:
        mv.extra[KEEP_ALIVE] = keep_alive
    info = gen.info
    if chat:
        ol = schema.chat_request(doc, info.max_stop_sequences, info.max_model_len)
    else:
        trusted = plane.trust_request_chat_template
        ol = schema.generate_request(doc, info.max_stop_sequences, info.max_model_len, trusted)
    shape = Shape(name, chat, start)
    if ol.load_only:
        return json_response(shape.loaded())
    oa = ol.oa
    plan = chat_tool_plan(oa, info.options, mv.name) if chat else None
    if ol.messages is not None:
        oa.generate.prompt = await chat_prompt(gen, ol.messages, len(req.body), oa.chat)
    generation = await plane.generate(FAMILY, mv, gen, oa.generate, split)
    with_calls = plan if plan is not None and plan.parser is not None else None
    if oa.generate.stream:
        framer = OllamaFramer(shape, with_calls)
        return streamed(framer, generation, NDJSON)
    return json_response(shape.answer(await _collect(generation, shape), with_calls))


async def _collect(generation: Generation, shape: Shape) -> Completion:
    """The one sequence's deltas gathered, the first one's time noted (the prompt's end)."""
    completion = Completion(0)
    try:
        async for delta in generation:
            shape.first = shape.first or perf_counter_ns()
            completion.add(delta)
    finally:
        generation.close()
    return completion


ENDPOINTS = [
    Endpoint("POST", "/api/generate", generate, "prompt"),
    Endpoint("POST", "/api/chat", chat, "messages"),
]


class Shape:
    """One request's lines: ``response`` (generate) or ``message`` (chat), and its timings."""

    def __init__(self, model: str, chat: bool, start: int) -> None:
        self.model, self.chat, self.start = model, chat, start
        self.first = 0  # when the first delta came (prompt evaluated)
        self.quoted = orjson.dumps(model)

    def line(
        self,
        text: str,
        calls: list[dict[str, Any]] | None,
        usage: Usage | None,
        stopped: tuple[FinishReason | None, str | None] | None = None,
    ) -> dict[str, Any]:
        out: dict[str, Any] = {"model": self.model, "created_at": now()}
        if self.chat:
            message: dict[str, Any] = {"role": "assistant", "content": text}
            if calls:
                message["tool_calls"] = calls
            out["message"] = message
        else:
            out["response"] = text
        if stopped is None:
            return out | {"done": False}
        return (
            out
            | {"done": True, "done_reason": stopped[1] or reason(stopped[0])}
            | (self.timings(usage or Usage(0, 0)))
        )

    def text_line(self, text: str) -> bytes:
        """A delta's line (``line(text, None, None)`` as bytes), put together directly: one a
        token."""
        head = b'{"model":' + self.quoted + b',"created_at":"' + now().encode()
        if self.chat:
            return (
                head
                + b'","message":{"role":"assistant","content":'
                + orjson.dumps(text)
                + (b'},"done":false}\n')
            )
        return head + b'","response":' + orjson.dumps(text) + b',"done":false}\n'

    def loaded(self) -> dict[str, Any]:
        """The answer to a load request (nothing to generate), as Ollama's: no counts."""
        return self.line("", None, None) | {"done": True, "done_reason": schema.LOAD}

    def timings(self, usage: Usage) -> dict[str, int]:
        end = perf_counter_ns()
        first = self.first or end
        return {
            "total_duration": end - self.start,
            "load_duration": 0,
            "prompt_eval_count": usage.prompt_tokens,
            "prompt_eval_duration": first - self.start,
            "eval_count": usage.completion_tokens,
            "eval_duration": end - first,
        }

    def answer(self, c: Completion, plan: ToolPlan | None) -> dict[str, Any]:
        usage = c.usage or Usage(0, len(c.token_ids))
        text, calls = c.text, None
        if plan is not None and plan.parser is not None:
            found = extract(plan.parser, c.text)
            text = found.content or ""
            calls = [ollama_call(t.name, t.arguments) for t in found.calls]
        return self.line(text, calls, usage, (c.finish_reason, None))


def reason(finish: FinishReason | None) -> str:
    return "length" if finish is FinishReason.LENGTH else "stop"


def ollama_call(name: str, arguments: str) -> dict[str, Any]:
    """A call as Ollama answers it: its arguments an object (a call cut short: the text)."""
    try:
        parsed: Any = orjson.loads(arguments or "{}")
    except orjson.JSONDecodeError:
        parsed = arguments
    return {"function": {"name": name, "arguments": parsed}}


class OllamaFramer:
    """NDJSON lines: each delta's text, the calls once whole (before the last line), the last
    line with the counts."""

    def __init__(self, shape: Shape, plan: ToolPlan | None) -> None:
        self.shape = shape
        self.plan = plan
        self.tools = ToolDeltas(plan) if plan is not None and plan.parser is not None else None
        self.calls: dict[int, list[str]] = {}  # index -> [name, arguments so far]

    def head(self) -> bytes:
        return b""

    def seen(self, delta: GenerateDelta) -> None:
        self.chunk(delta)

    def chunk(self, delta: GenerateDelta) -> bytes:
        if not self.shape.first:
            self.shape.first = perf_counter_ns()
        text = delta.text
        if self.tools is not None:
            text, pieces, _ = self.tools.feed(delta)
            self._gather(pieces)
        out = self.shape.text_line(text) if text else b""
        if delta.finish_reason is None:
            return out
        if self.calls:
            calls = [ollama_call(n, a) for n, a in self.calls.values()]
            out += _ndjson(self.shape.line("", calls, None))
        stopped = (delta.finish_reason, None)
        return out + _ndjson(self.shape.line("", None, delta.usage, stopped))

    def _gather(self, pieces: list[CallDelta]) -> None:
        for piece in pieces:
            name_args = self.calls.setdefault(piece.index, ["", ""])
            if piece.name:
                name_args[0] = piece.name
            name_args[1] += piece.arguments or ""

    def tail(self) -> bytes:
        return b""

    def error(self, exc: ServingError) -> bytes:
        return stream_error(exc, b"")


def _ndjson(doc: dict[str, Any]) -> bytes:
    return orjson.dumps(doc) + b"\n"
