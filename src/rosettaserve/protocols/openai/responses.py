"""OpenAI's Responses API: ``POST /v1/responses``, ``GET`` and ``DELETE /v1/responses/{id}``.

The request's messages are rendered and generated as a chat completion of the same messages
is, so the greedy text is the same. A response made whole (not cut by a failure) is kept in
the plane's bounded store when ``store`` is true (``--responses-store``): a later request
names it as ``previous_response_id`` (its input and output come before the new input; its
instructions do not), and ``GET`` / ``DELETE`` reach it. Under prefill/decode disaggregation
the two halves of a request run on two instances, neither holding the whole exchange: nothing
is kept there, and ``previous_response_id`` is refused.

The answer holds one ``message`` output item; ``function_call`` output items wait for the
tool parsers (requests that would need them are refused in responses_schema.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rosettaserve.core.errors import InvalidInput, NotFound, ServingError
from rosettaserve.core.generate import (
    Completion,
    FinishReason,
    GenerateDelta,
    Usage,
    json_object,
)
from rosettaserve.core.generation_plane import GenerationPlane, Split, chat_prompt, reply_identity
from rosettaserve.core.tools import ToolSpec
from rosettaserve.protocols.llm_http import SSE_HEADERS, Endpoint, streamed
from rosettaserve.protocols.openai import convert
from rosettaserve.protocols.openai.responses_schema import ResponsesRequest, responses_request
from rosettaserve.protocols.openai.schema import chat_messages, model_name
from rosettaserve.web.routing import HttpRequest, HttpResponse, json_response

FAMILY = "openai-responses"
RESPONSE_ID = r"/v1/responses/(?P<response_id>[^/]{1,256})"


def error_response(exc: ServingError) -> HttpResponse:
    return json_response(convert.error_doc(exc), exc.http_status, exc.headers)


def stream_error(exc: ServingError, first: bytes) -> bytes:
    """A stream that failed after it began, where its events are not counted (the scheduler's
    relay): the ``error`` event."""
    return event("error", _error_event(exc))


def event(kind: str, doc: dict[str, Any]) -> bytes:
    return b"event: " + kind.encode() + b"\n" + convert.sse({"type": kind, **doc})


def _error_event(exc: ServingError) -> dict[str, Any]:
    error = convert.error_doc(exc)["error"]
    return {"code": error["code"] or error["type"], "message": exc.message, "param": None}


@dataclass
class Head:
    """What every event of one response shares."""

    id: str
    message_id: str
    created_at: int
    model: str
    request: ResponsesRequest
    kept: bool  # stored once made whole

    def response(
        self, status: str, output: list[dict[str, Any]], usage: Usage | None, **more: Any
    ) -> dict[str, Any]:
        rr = self.request
        doc: dict[str, Any] = {
            "id": self.id,
            "object": "response",
            "created_at": self.created_at,
            "status": status,
            "error": None,
            "incomplete_details": None,
            "instructions": rr.instructions,
            "model": self.model,
            "output": output,
            "previous_response_id": rr.previous_response_id,
            "reasoning": {"effort": None, "summary": None},
            "store": self.kept,
            "text": {"format": rr.text_format},
            "tool_choice": _tool_choice(rr),
            "tools": [_tool(t) for t in rr.tools],
            "truncation": "disabled",
            "metadata": rr.metadata,
            "background": False,
            "usage": None if usage is None else _usage(usage),
            **rr.echo,
        }
        return doc | more

    def message(self, text: str, status: str) -> dict[str, Any]:
        return {
            "id": self.message_id,
            "type": "message",
            "status": status,
            "role": "assistant",
            "content": [] if status == "in_progress" else [_text_part(text)],
        }


def _tool_choice(rr: ResponsesRequest) -> Any:
    choice = rr.tool_choice
    return {"type": "function", "name": choice.name} if choice.name else choice.mode.value


def _tool(t: ToolSpec) -> dict[str, Any]:
    return {
        "type": "function",
        "name": t.name,
        "description": t.description,
        "parameters": dict(t.parameters),
        "strict": None,
    }


def _text_part(text: str) -> dict[str, Any]:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


def _usage(u: Usage) -> dict[str, Any]:
    return {
        "input_tokens": u.prompt_tokens,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": u.completion_tokens,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": u.total_tokens,
    }


def _status(reason: FinishReason | None) -> str:
    return "incomplete" if reason is FinishReason.LENGTH else "completed"


def _incomplete(status: str) -> dict[str, Any]:
    return {
        "incomplete_details": {"reason": "max_output_tokens"} if status == "incomplete" else None
    }


# -- the routes ----------------------------------------------------------------------------------


async def create(plane: GenerationPlane, req: HttpRequest, split: Split | None) -> HttpResponse:
    doc = json_object(req.body)
    mv, gen = plane.find(model_name(doc))
    rr = responses_request(doc, gen.info.max_stop_sequences)
    history = _history(plane, rr, split)
    # read as chat's messages are, so the template renders what the chat completion would
    messages = chat_messages(rr.messages(history))
    rr.generate.prompt = await chat_prompt(gen, messages, len(req.body))
    raw, created = reply_identity(split, "resp")
    token = raw.partition("-")[2]  # both halves of a split request share it
    kept = rr.store and split is None
    head = Head(f"resp_{token}", f"msg_{token}", created, mv.name, rr, kept)
    rr.generate.request_id = head.id
    generation = await plane.generate(FAMILY, mv, gen, rr.generate, split)
    keep = Keeper(plane, head, [*history, *rr.input])
    if rr.generate.stream:
        return streamed(ResponsesFramer(head, keep), generation, headers=SSE_HEADERS)
    done = await generation.collect()
    c: Completion = done[0]
    status = _status(c.finish_reason)
    usage = c.usage or Usage(0, len(c.token_ids))
    body = head.response(status, [head.message(c.text, status)], usage, **_incomplete(status))
    if generation.complete:
        keep(body, c.text)
    return json_response(body)


def _history(plane: GenerationPlane, rr: ResponsesRequest, split: Split | None) -> list[Any]:
    """The messages of the exchange ``previous_response_id`` names ([] when none)."""
    if rr.previous_response_id is None:
        return []
    if split is not None:
        raise InvalidInput(
            "'previous_response_id' is not supported with prefill/decode disaggregation: "
            "responses are not kept there"
        )
    found = plane.responses.get(rr.previous_response_id)
    if found is None:
        raise NotFound(f"Response with id '{rr.previous_response_id}' not found.")
    messages: list[Any] = found["messages"]
    return messages


class Keeper:
    """Stores a response made whole, with the messages a later request continues from."""

    def __init__(self, plane: GenerationPlane, head: Head, messages: list[Any]) -> None:
        self.plane, self.head, self.messages = plane, head, messages

    def __call__(self, response: dict[str, Any], text: str) -> None:
        if not self.head.kept:
            return
        said = {"role": "assistant", "content": text}
        kept = {"response": response, "messages": [*self.messages, said]}
        self.plane.responses.put(self.head.id, kept)


async def retrieve(plane: GenerationPlane, req: HttpRequest, split: Split | None) -> HttpResponse:
    found = plane.responses.get(req.params["response_id"])
    if found is None:
        raise NotFound(f"Response with id '{req.params['response_id']}' not found.")
    return json_response(found["response"])


async def delete(plane: GenerationPlane, req: HttpRequest, split: Split | None) -> HttpResponse:
    response_id = req.params["response_id"]
    if plane.responses.pop(response_id) is None:
        raise NotFound(f"Response with id '{response_id}' not found.")
    return json_response({"id": response_id, "object": "response.deleted", "deleted": True})


ENDPOINTS = [Endpoint("POST", "/v1/responses", create, "input")]
WHOLE = [  # served whole on every instance, never split
    Endpoint("GET", RESPONSE_ID, retrieve),
    Endpoint("DELETE", RESPONSE_ID, delete),
]


# -- streaming -----------------------------------------------------------------------------------


class ResponsesFramer:
    """The SDK's events: created, in_progress, the message item and its text part added, the
    text's deltas, then everything done and ``response.completed`` (``response.incomplete``
    when cut by max_output_tokens), each with its ``sequence_number``."""

    def __init__(self, head: Head, keep: Keeper) -> None:
        self.h, self.keep = head, keep
        self.sequence = 0
        self.text = ""
        self.usage: Usage | None = None
        self.started = False

    def _event(self, kind: str, doc: dict[str, Any]) -> bytes:
        chunk = event(kind, {**doc, "sequence_number": self.sequence})
        self.sequence += 1
        return chunk

    def _at(self) -> dict[str, Any]:
        return {"item_id": self.h.message_id, "output_index": 0, "content_index": 0}

    def head_events(self) -> bytes:
        self.started = True
        h = self.h
        pending = h.response("in_progress", [], None)
        return b"".join([
            self._event("response.created", {"response": pending}),
            self._event("response.in_progress", {"response": pending}),
            self._event("response.output_item.added",
                        {"output_index": 0, "item": h.message("", "in_progress")}),
            self._event("response.content_part.added", {**self._at(), "part": _text_part("")}),
        ])  # fmt: skip

    def head(self) -> bytes:
        return self.head_events()

    def seen(self, delta: GenerateDelta) -> None:
        if not self.started:  # the prefill instance sent the head and this delta's event
            self.head_events()
        self.chunk(delta)

    def chunk(self, delta: GenerateDelta) -> bytes:
        if delta.usage is not None:
            self.usage = delta.usage
        out = b""
        if delta.text:
            self.text += delta.text
            doc = {**self._at(), "delta": delta.text, "logprobs": []}
            out = self._event("response.output_text.delta", doc)
        if delta.finish_reason is not None:
            out += self._done(_status(delta.finish_reason))
        return out

    def _done(self, status: str) -> bytes:
        h, at, text = self.h, self._at(), self.text
        item = h.message(text, status)
        usage = self.usage or Usage(0, 0)
        final = h.response(status, [item], usage, **_incomplete(status))
        self.keep(final, text)
        last = "response.completed" if status == "completed" else "response.incomplete"
        return b"".join([
            self._event("response.output_text.done", {**at, "text": text, "logprobs": []}),
            self._event("response.content_part.done", {**at, "part": _text_part(text)}),
            self._event("response.output_item.done", {"output_index": 0, "item": item}),
            self._event(last, {"response": final}),
        ])  # fmt: skip

    def tail(self) -> bytes:
        return b""

    def error(self, exc: ServingError) -> bytes:
        h = self.h
        failed = h.response("failed", [h.message(self.text, "incomplete")], self.usage)
        failed["error"] = {"code": "server_error", "message": exc.message}
        return self._event("error", _error_event(exc)) + self._event(
            "response.failed", {"response": failed}
        )
