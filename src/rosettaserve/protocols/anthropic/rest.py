"""Anthropic's Messages API: ``POST /v1/messages`` and ``POST /v1/messages/count_tokens``.

The messages are rendered and generated as a chat completion of the same messages is, so the
greedy text is the same. Errors are Anthropic's ``{"type": "error", "error": {"type",
"message"}}`` with its status codes (a full queue is its 529 ``overloaded_error``); a stream
that fails after it began ends with an ``error`` event. The answer holds one ``text`` block;
with ``tools`` the request gets the tool plan chat gets (protocols/tools/choice.py), and
the calls are ``tool_use`` blocks (output.py).
"""

from __future__ import annotations

from typing import Any

from rosettaserve.core.errors import Overloaded, ServingError
from rosettaserve.core.generate import ChatTemplate, Usage, json_object
from rosettaserve.core.generation_plane import (
    GenerationPlane,
    Split,
    chat_prompt,
    reply_identity,
    tokenized,
)
from rosettaserve.core.tools import ChoiceMode
from rosettaserve.protocols.anthropic import schema
from rosettaserve.protocols.anthropic.output import Framer, event, whole
from rosettaserve.protocols.llm_http import SSE_HEADERS, Endpoint, streamed
from rosettaserve.protocols.openai.schema import chat_messages
from rosettaserve.protocols.tools.choice import family_plan, template_tools
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


def stream_error(exc: ServingError, first: bytes) -> bytes:
    """The last event of a stream that failed after it began."""
    return event("error", error_doc(exc))


# -- the routes ----------------------------------------------------------------------------------


async def messages(plane: GenerationPlane, req: HttpRequest, split: Split | None) -> HttpResponse:
    doc = json_object(req.body)
    mv, gen = await plane.loaded(schema.model_name(doc))
    mr = schema.messages_request(doc, gen.info.max_stop_sequences)
    plan, chat = family_plan(
        mr.tools, mr.tool_choice, gen.info.options, mv.name, mr.generate.sampling
    )
    # read as chat's messages are, so the template renders what the chat completion would
    prompt = await chat_prompt(gen, chat_messages(mr.messages), len(req.body), chat)
    # message_start says how many tokens the prompt has: it is tokenized here, once
    mr.generate.prompt_token_ids = await tokenized(gen, prompt, False)
    raw, _ = reply_identity(split, "msg")
    msg_id = "msg_" + raw.partition("-")[2]  # both halves of a split request share it
    mr.generate.request_id = msg_id
    generation = await plane.generate(FAMILY, mv, gen, mr.generate, split)
    if mr.generate.stream:
        framer = MessagesFramer(msg_id, mv.name, len(mr.generate.prompt_token_ids), plan)
        return streamed(framer, generation, headers=SSE_HEADERS)
    c = (await generation.collect())[0]
    usage = c.usage or Usage(len(mr.generate.prompt_token_ids), len(c.token_ids))
    return json_response(whole(msg_id, mv.name, plan, c, usage))


async def count_tokens(
    plane: GenerationPlane, req: HttpRequest, split: Split | None
) -> HttpResponse:
    doc = json_object(req.body)
    mv, gen = await plane.loaded(schema.model_name(doc))
    mr = schema.messages_request(doc, gen.info.max_stop_sequences, counting=True)
    offered = mr.tools and mr.tool_choice.mode is not ChoiceMode.NONE  # as messages renders them
    chat = ChatTemplate(tools=template_tools(mr.tools)) if offered else None
    with mv:  # in flight while it is rendered and tokenized: unloading waits for it
        prompt = await chat_prompt(gen, chat_messages(mr.messages), len(req.body), chat)
        ids = await tokenized(gen, prompt, False)
    return json_response({"input_tokens": len(ids)})


ENDPOINTS = [Endpoint("POST", "/v1/messages", messages, "messages")]
WHOLE = [Endpoint("POST", "/v1/messages/count_tokens", count_tokens)]  # generates nothing


class MessagesFramer(Framer):
    """The stream's events (output.py), and the ``error`` event of a stream that failed."""

    def tail(self) -> bytes:
        return b""

    def error(self, exc: ServingError) -> bytes:
        return stream_error(exc, b"")
