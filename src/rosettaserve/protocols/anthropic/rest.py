"""Anthropic's Messages API: ``POST /v1/messages`` and ``POST /v1/messages/count_tokens``.

The messages are rendered and generated as a chat completion of the same messages is, so the
greedy text is the same. Errors are Anthropic's ``{"type": "error", "error": {"type",
"message"}}`` with its status codes (a full queue is its 529 ``overloaded_error``); a stream
that fails after it began ends with an ``error`` event. The answer holds one ``text`` block;
``tool_use`` blocks wait for the tool parsers (requests that would need them are refused in
schema.py).
"""

from __future__ import annotations

from typing import Any

import orjson

from rosettaserve.core.errors import Overloaded, ServingError
from rosettaserve.core.generate import FinishReason, GenerateDelta, Usage, json_object
from rosettaserve.core.generation_plane import (
    GenerationPlane,
    Split,
    chat_prompt,
    reply_identity,
    tokenized,
)
from rosettaserve.protocols.anthropic import schema
from rosettaserve.protocols.llm_http import SSE_HEADERS, Endpoint, streamed
from rosettaserve.protocols.openai.schema import chat_messages
from rosettaserve.web.routing import HttpRequest, HttpResponse, json_response

FAMILY = "anthropic"
OVERLOADED_STATUS = 529  # Anthropic's "overloaded_error"
ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    504: "timeout_error",
    OVERLOADED_STATUS: "overloaded_error",
}


def error_status(exc: ServingError) -> int:
    return OVERLOADED_STATUS if isinstance(exc, Overloaded) else exc.http_status


def error_doc(exc: ServingError) -> dict[str, Any]:
    status = error_status(exc)
    kind = ERROR_TYPES.get(status, "api_error" if status >= 500 else "invalid_request_error")
    return {"type": "error", "error": {"type": kind, "message": exc.message}}


def error_response(exc: ServingError) -> HttpResponse:
    return json_response(error_doc(exc), error_status(exc), exc.headers)


def event(kind: str, doc: dict[str, Any]) -> bytes:
    return b"event: " + kind.encode() + b"\ndata: " + orjson.dumps(doc) + b"\n\n"


def stream_error(exc: ServingError, first: bytes) -> bytes:
    """The last event of a stream that failed after it began."""
    return event("error", error_doc(exc))


def stop(reason: FinishReason | None, stop_reason: str | int | None) -> tuple[str, str | None]:
    """Anthropic's ``stop_reason`` and ``stop_sequence``."""
    if reason is FinishReason.LENGTH:
        return "max_tokens", None
    if reason is FinishReason.STOP and isinstance(stop_reason, str):
        return "stop_sequence", stop_reason
    return "end_turn", None


def _usage(input_tokens: int, output_tokens: int) -> dict[str, int]:
    return {
        "input_tokens": input_tokens,
        "output_tokens": output_tokens,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
    }


def message(
    msg_id: str, model: str, text: str | None, stopped: tuple[str | None, str | None], usage: Usage
) -> dict[str, Any]:
    """The message object (``text`` None: its content not begun, as message_start has it)."""
    return {
        "id": msg_id,
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [] if text is None else [{"type": "text", "text": text}],
        "stop_reason": stopped[0],
        "stop_sequence": stopped[1],
        "usage": _usage(usage.prompt_tokens, usage.completion_tokens),
    }


# -- the routes ----------------------------------------------------------------------------------


async def messages(plane: GenerationPlane, req: HttpRequest, split: Split | None) -> HttpResponse:
    doc = json_object(req.body)
    mv, gen = plane.find(schema.model_name(doc))
    mr = schema.messages_request(doc, gen.info.max_stop_sequences)
    # read as chat's messages are, so the template renders what the chat completion would
    prompt = await chat_prompt(gen, chat_messages(mr.messages), len(req.body))
    # message_start says how many tokens the prompt has: it is tokenized here, once
    mr.generate.prompt_token_ids = await tokenized(gen, prompt, False)
    raw, _ = reply_identity(split, "msg")
    msg_id = "msg_" + raw.partition("-")[2]  # both halves of a split request share it
    mr.generate.request_id = msg_id
    generation = await plane.generate(FAMILY, mv, gen, mr.generate, split)
    if mr.generate.stream:
        framer = MessagesFramer(msg_id, mv.name, len(mr.generate.prompt_token_ids))
        return streamed(framer, generation, headers=SSE_HEADERS)
    c = (await generation.collect())[0]
    usage = c.usage or Usage(len(mr.generate.prompt_token_ids), len(c.token_ids))
    return json_response(
        message(msg_id, mv.name, c.text, stop(c.finish_reason, c.stop_reason), usage)
    )


async def count_tokens(
    plane: GenerationPlane, req: HttpRequest, split: Split | None
) -> HttpResponse:
    doc = json_object(req.body)
    mv, gen = plane.find(schema.model_name(doc))
    mr = schema.messages_request(doc, gen.info.max_stop_sequences, counting=True)
    with mv:  # in flight while it is rendered and tokenized: unloading waits for it
        prompt = await chat_prompt(gen, chat_messages(mr.messages), len(req.body))
        ids = await tokenized(gen, prompt, False)
    return json_response({"input_tokens": len(ids)})


ENDPOINTS = [Endpoint("POST", "/v1/messages", messages, "messages")]
WHOLE = [Endpoint("POST", "/v1/messages/count_tokens", count_tokens)]  # generates nothing


class MessagesFramer:
    """message_start, the text block's start and a ping, its text deltas, then its stop,
    message_delta (stop_reason, output tokens) and message_stop."""

    def __init__(self, msg_id: str, model: str, input_tokens: int) -> None:
        self.msg_id, self.model, self.input_tokens = msg_id, model, input_tokens

    def head(self) -> bytes:
        start = message(self.msg_id, self.model, None, (None, None), Usage(self.input_tokens, 0))
        return (
            event("message_start", {"type": "message_start", "message": start})
            + event("content_block_start", {"type": "content_block_start", "index": 0,
                                            "content_block": {"type": "text", "text": ""}})
            + event("ping", {"type": "ping"})
        )  # fmt: skip

    def seen(self, delta: GenerateDelta) -> None:
        """Nothing to remember: the usage comes with the last delta."""

    def chunk(self, delta: GenerateDelta) -> bytes:
        out = b""
        if delta.text:
            text = {"type": "text_delta", "text": delta.text}
            out = event("content_block_delta", {"type": "content_block_delta", "index": 0,
                                                "delta": text})  # fmt: skip
        if delta.finish_reason is None:
            return out
        reason, sequence = stop(delta.finish_reason, delta.stop_reason)
        tokens = delta.usage.completion_tokens if delta.usage else 0
        return (
            out
            + event("content_block_stop", {"type": "content_block_stop", "index": 0})
            + event("message_delta", {"type": "message_delta",
                                      "delta": {"stop_reason": reason, "stop_sequence": sequence},
                                      "usage": {"output_tokens": tokens}})
            + event("message_stop", {"type": "message_stop"})
        )  # fmt: skip

    def tail(self) -> bytes:
        return b""

    def error(self, exc: ServingError) -> bytes:
        return stream_error(exc, b"")
