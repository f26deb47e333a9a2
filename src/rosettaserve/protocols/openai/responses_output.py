"""A response's output items and its stream of events, built by one state machine.

``Items`` reads the generated text as it comes (through the tool plan's parser when the
request offered tools) and keeps the output items in the order they began: one ``message``
item for the text, a ``function_call`` item per call. A stream's events are what each piece
added; the non-streamed answer is the same machine fed the whole text at once, so a stream
reassembles to the non-streamed items (the message item first when the text begins before
the calls, as a tool parser's output does). A call's ids come from the response's own id
(``fc_<id>_<k>``, ``call_<id>_<k>``): the two halves of a prefill/decode split derive the same.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rosettaserve.core.errors import ServingError
from rosettaserve.core.generate import FinishReason, GenerateDelta, Usage
from rosettaserve.core.tools import ToolSpec
from rosettaserve.protocols.openai import convert
from rosettaserve.protocols.openai.responses_schema import ResponsesRequest
from rosettaserve.protocols.tools import ToolStream
from rosettaserve.protocols.tools.choice import ToolPlan

Event = tuple[str, dict[str, Any]]


def event(kind: str, doc: dict[str, Any]) -> bytes:
    return b"event: " + kind.encode() + b"\n" + convert.sse({"type": kind, **doc})


def error_event(exc: ServingError) -> dict[str, Any]:
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
            "content": [] if status == "in_progress" else [text_part(text)],
        }

    def call(self, k: int, name: str, arguments: str, status: str) -> dict[str, Any]:
        token = self.id.removeprefix("resp_")
        return {
            "id": f"fc_{token}_{k}",
            "type": "function_call",
            "call_id": f"call_{token}_{k}",
            "name": name,
            "arguments": arguments,
            "status": status,
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


def text_part(text: str) -> dict[str, Any]:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


def _usage(u: Usage) -> dict[str, Any]:
    return {
        "input_tokens": u.prompt_tokens,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": u.completion_tokens,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": u.total_tokens,
    }


def status_of(reason: FinishReason | None) -> str:
    return "incomplete" if reason is FinishReason.LENGTH else "completed"


def incomplete(status: str) -> dict[str, Any]:
    return {
        "incomplete_details": {"reason": "max_output_tokens"} if status == "incomplete" else None
    }


class Items:
    """The output items so far and the events that made them (see the module's doc)."""

    def __init__(self, head: Head, plan: ToolPlan | None) -> None:
        self.h = head
        self.tools = ToolStream(plan.parser) if plan is not None and plan.parser else None
        self.text = ""
        self.message_at: int | None = None  # the message item's output index
        self.calls: list[tuple[int, str, str]] = []  # (output index, name, arguments)
        self.count = 0  # items begun

    def open_message(self) -> list[Event]:
        self.message_at, self.count = self.count, self.count + 1
        at = {"item_id": self.h.message_id, "output_index": self.message_at, "content_index": 0}
        item = self.h.message("", "in_progress")
        return [
            ("response.output_item.added", {"output_index": self.message_at, "item": item}),
            ("response.content_part.added", {**at, "part": text_part("")}),
        ]

    def feed(self, text: str, final: bool) -> list[Event]:
        """The events ``text`` adds (``final``: the output is whole)."""
        content, pieces = self.tools.feed(text, final) if self.tools else (text, [])
        events: list[Event] = []
        if content:
            if self.message_at is None:
                events += self.open_message()
            self.text += content
            ref: dict[str, Any] = {"item_id": self.h.message_id, "output_index": self.message_at}
            ref |= {"content_index": 0, "delta": content, "logprobs": []}
            events.append(("response.output_text.delta", ref))
        for piece in pieces:
            if piece.name is not None:
                self.calls.append((self.count, piece.name, ""))
                item = self.h.call(piece.index, piece.name, "", "in_progress")
                events.append(("response.output_item.added", {"output_index": self.count,
                                                              "item": item}))  # fmt: skip
                self.count += 1
            index, name, arguments = self.calls[piece.index]
            self.calls[piece.index] = (index, name, arguments + piece.arguments)
            if piece.arguments:
                ref = {"item_id": self._call_id(piece.index), "output_index": index}
                events.append(("response.function_call_arguments.delta", ref | {
                    "delta": piece.arguments}))  # fmt: skip
        if final and self.count == 0:  # no text and no call: an empty message
            events += self.open_message()
        return events

    def _call_id(self, k: int) -> str:
        return str(self.h.call(k, "", "", "")["id"])

    def output(self, status: str) -> list[dict[str, Any]]:
        """The items, made whole, in output order."""
        items: list[tuple[int, dict[str, Any]]] = [
            (at, self.h.call(k, name, arguments, status))
            for k, (at, name, arguments) in enumerate(self.calls)
        ]
        if self.message_at is not None:
            items.append((self.message_at, self.h.message(self.text, status)))
        return [item for _, item in sorted(items, key=lambda pair: pair[0])]

    def done(self, status: str) -> list[Event]:
        """Each item's closing events, in output order."""
        events: list[Event] = []
        for at, item in enumerate(self.output(status)):
            if item["type"] == "message":
                ref = {"item_id": item["id"], "output_index": at, "content_index": 0}
                events.append(("response.output_text.done", {**ref, "text": self.text,
                                                             "logprobs": []}))  # fmt: skip
                events.append(("response.content_part.done", {**ref, "part": item["content"][0]}))
            else:
                ref = {"item_id": item["id"], "output_index": at}
                events.append(("response.function_call_arguments.done", {**ref,
                               "name": item["name"], "arguments": item["arguments"]}))  # fmt: skip
            events.append(("response.output_item.done", {"output_index": at, "item": item}))
        return events


Keep = Callable[[dict[str, Any]], None]  # the response made whole


def whole(
    head: Head, plan: ToolPlan | None, text: str, reason: FinishReason | None, usage: Usage
) -> dict[str, Any]:
    """A non-streamed answer."""
    items = Items(head, plan)
    items.feed(text, True)
    status = status_of(reason)
    return head.response(status, items.output(status), usage, **incomplete(status))


class ResponsesFramer:
    """The SDK's events: created, in_progress, each item added and its deltas, then every item
    done and ``response.completed`` (``response.incomplete`` when cut by max_output_tokens),
    each with its ``sequence_number``. Without tools the message item is added first, before
    any text; with tools an item is added when its first piece comes."""

    def __init__(self, head: Head, plan: ToolPlan | None, keep: Keep) -> None:
        self.h, self.keep = head, keep
        self.items = Items(head, plan)
        self.eager = plan is None
        self.sequence = 0
        self.usage: Usage | None = None
        self.started = False

    def _events(self, events: list[Event]) -> bytes:
        out = []
        for kind, doc in events:
            out.append(event(kind, {**doc, "sequence_number": self.sequence}))
            self.sequence += 1
        return b"".join(out)

    def head(self) -> bytes:
        self.started = True
        pending = self.h.response("in_progress", [], None)
        events = [("response.created", {"response": pending})]
        events.append(("response.in_progress", {"response": pending}))
        return self._events(events + (self.items.open_message() if self.eager else []))

    def seen(self, delta: GenerateDelta) -> None:
        if not self.started:  # the prefill instance sent the head and this delta's events
            self.head()
        self.chunk(delta)

    def chunk(self, delta: GenerateDelta) -> bytes:
        if delta.usage is not None:
            self.usage = delta.usage
        final = delta.finish_reason is not None
        out = self._events(self.items.feed(delta.text, final))
        if final:
            out += self._done(status_of(delta.finish_reason))
        return out

    def _done(self, status: str) -> bytes:
        items = self.items
        final = self.h.response(
            status, items.output(status), self.usage or Usage(0, 0), **incomplete(status)
        )
        self.keep(final)
        last = "response.completed" if status == "completed" else "response.incomplete"
        return self._events([*items.done(status), (last, {"response": final})])

    def tail(self) -> bytes:
        return b""

    def error(self, exc: ServingError) -> bytes:
        failed = self.h.response("failed", self.items.output("incomplete"), self.usage)
        failed["error"] = {"code": "server_error", "message": exc.message}
        return self._events(
            [("error", error_event(exc)), ("response.failed", {"response": failed})]
        )
