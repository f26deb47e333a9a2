"""OpenAI's Responses API: ``POST /v1/responses``, ``GET`` and ``DELETE /v1/responses/{id}``.

The request's messages are rendered and generated as a chat completion of the same messages
is, so the greedy text is the same. A response made whole (not cut by a failure) is kept in
the plane's bounded store when ``store`` is true (``--responses-store``): a later request
names it as ``previous_response_id`` (its input and output come before the new input; its
instructions do not), and ``GET`` / ``DELETE`` reach it (responses_store.py). Under
prefill/decode disaggregation the two halves of a request run on two instances, neither
holding the whole exchange: the scheduler keeps the responses (pd/responses_kept.py) and
puts the earlier exchange into the input before an instance sees the request, so an instance
keeps nothing and reads no ``previous_response_id`` there (it only echoes it).

With ``tools`` the request gets the tool plan chat gets (protocols/tools/choice.py): the
calls the model makes are ``function_call`` output items (responses_output.py), and the
turn kept for ``previous_response_id`` holds them, so ``function_call_output`` items name
them on the next request.
"""

from __future__ import annotations

from typing import Any

from rosettaserve.core.errors import ServingError
from rosettaserve.core.generate import Completion, Usage, json_object
from rosettaserve.core.generation_plane import GenerationPlane, Split, chat_prompt, reply_identity
from rosettaserve.protocols.llm_http import SSE_HEADERS, Endpoint, streamed
from rosettaserve.protocols.openai import convert
from rosettaserve.protocols.openai.responses_output import (
    Head,
    ResponsesFramer,
    error_event,
    event,
    whole,
)
from rosettaserve.protocols.openai.responses_schema import (
    ResponsesRequest,
    input_messages,
    responses_request,
)
from rosettaserve.protocols.openai.responses_store import (
    Store,
    deleted,
    earlier,
    input_items,
    keep,
    retrieved,
)
from rosettaserve.protocols.openai.schema import chat_messages, model_name
from rosettaserve.protocols.tools.choice import family_plan
from rosettaserve.web.routing import HttpRequest, HttpResponse, json_response

FAMILY = "openai-responses"
RESPONSE_ID = r"/v1/responses/(?P<response_id>[^/]{1,256})"


def error_response(exc: ServingError) -> HttpResponse:
    return json_response(convert.error_doc(exc), exc.http_status, exc.headers)


def stream_error(exc: ServingError, first: bytes) -> bytes:
    """A stream that failed after it began, where its events are not counted (the scheduler's
    relay): the ``error`` event."""
    return event("error", error_event(exc))


# -- the routes ----------------------------------------------------------------------------------


async def create(plane: GenerationPlane, req: HttpRequest, split: Split | None) -> HttpResponse:
    doc = json_object(req.body)
    mv, gen = await plane.loaded(model_name(doc))
    rr = responses_request(doc, gen.info.max_stop_sequences)
    plan, chat = family_plan(
        rr.tools, rr.tool_choice, gen.info.options, mv.name, rr.generate.sampling
    )
    history = _history(plane, rr, split)
    # read as chat's messages are, so the template renders what the chat completion would
    messages = chat_messages(rr.messages(input_messages(history) if history else []))
    rr.generate.prompt = await chat_prompt(gen, messages, len(req.body), chat)
    raw, created = reply_identity(split, "resp")
    token = raw.partition("-")[2]  # both halves of a split request share it
    head = Head(f"resp_{token}", f"msg_{token}", created, mv.name, rr, rr.store)
    rr.generate.request_id = head.id
    generation = await plane.generate(FAMILY, mv, gen, rr.generate, split)
    store = plane.responses if split is None else None  # under PD the scheduler keeps it
    keeper = Keeper(store, head, [*history, *input_items(doc.get("input"))])
    if rr.generate.stream:
        return streamed(ResponsesFramer(head, plan, keeper), generation, headers=SSE_HEADERS)
    c: Completion = (await generation.collect())[0]
    usage = c.usage or Usage(0, len(c.token_ids))
    body = whole(head, plan, c.text, c.finish_reason, usage)
    if generation.complete:
        keeper(body)
    return json_response(body)


def _history(plane: GenerationPlane, rr: ResponsesRequest, split: Split | None) -> list[Any]:
    """The items of the exchange ``previous_response_id`` names ([] when none). Under PD the
    scheduler has put them into the input already."""
    return earlier(plane.responses, rr.previous_response_id if split is None else None)


class Keeper:
    """Stores a response made whole, with the items a later request continues from."""

    def __init__(self, store: Store | None, head: Head, items: list[Any]) -> None:
        self.store, self.head, self.items = store, head, items

    def __call__(self, response: dict[str, Any]) -> None:
        if self.store is not None and self.head.kept:
            keep(self.store, response, self.items)


async def retrieve(plane: GenerationPlane, req: HttpRequest, split: Split | None) -> HttpResponse:
    return retrieved(plane.responses, req.params["response_id"])


async def delete(plane: GenerationPlane, req: HttpRequest, split: Split | None) -> HttpResponse:
    return deleted(plane.responses, req.params["response_id"])


ENDPOINTS = [Endpoint("POST", "/v1/responses", create, "input")]
WHOLE = [  # served whole on every instance, never split
    Endpoint("GET", RESPONSE_ID, retrieve),
    Endpoint("DELETE", RESPONSE_ID, delete),
]
