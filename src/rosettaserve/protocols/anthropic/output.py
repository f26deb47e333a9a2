"""A message's content blocks and its stream of events, built by one state machine.

``Blocks`` reads the generated text as it comes (through the tool plan's parser when the
request offered tools): the text is a ``text`` block, each call a ``tool_use`` block (its
``input`` the arguments' object, streamed as ``input_json_delta`` pieces of its JSON text).
Blocks are streamed one after another, as Anthropic's are: a block stops before the next
starts. The non-streamed message is the same machine fed the whole text at once, so a stream
accumulates (the anthropic SDK's ``get_final_message``) to the non-streamed message. A call's
id comes from the message's own id (``toolu_<id>_<k>``): the two halves of a prefill/decode
split derive the same.
"""

from __future__ import annotations

from typing import Any

import orjson

from rosettaserve.core.generate import Completion, FinishReason, GenerateDelta, Usage
from rosettaserve.protocols.tools import ToolStream
from rosettaserve.protocols.tools.choice import ToolPlan

Event = tuple[str, dict[str, Any]]


def event(kind: str, doc: dict[str, Any]) -> bytes:
    return b"event: " + kind.encode() + b"\ndata: " + orjson.dumps(doc) + b"\n\n"


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
    msg_id: str,
    model: str,
    content: list[dict[str, Any]],
    stopped: tuple[str | None, str | None],
    usage: Usage,
) -> dict[str, Any]:
    return {
        "id": msg_id,
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": stopped[0],
        "stop_sequence": stopped[1],
        "usage": _usage(usage.prompt_tokens, usage.completion_tokens),
    }


def _input(arguments: str) -> Any:
    """A call's arguments as ``input``: an object (a call cut short has none: ``{}``)."""
    try:
        value = orjson.loads(arguments or "{}")
    except orjson.JSONDecodeError:
        return {}
    return value if isinstance(value, dict) else {}


class Blocks:
    """The content blocks so far and the events that made them (see the module's doc)."""

    def __init__(self, msg_id: str, plan: ToolPlan | None) -> None:
        self.token = msg_id.removeprefix("msg_")
        self.tools = ToolStream(plan.parser) if plan is not None and plan.parser else None
        self.blocks: list[dict[str, Any]] = []  # text blocks' text, tool_use blocks' JSON text
        self.calls: list[int] = []  # each call's block index
        self.open = False  # the last block has not stopped

    def _start(self, block: dict[str, Any]) -> list[Event]:
        events = self._stop()
        self.blocks.append(block)
        self.open = True
        shown = block if block["type"] == "text" else {**block, "input": {}}
        shown = {k: v for k, v in shown.items() if k != "json"}
        start = {"index": len(self.blocks) - 1, "content_block": shown}
        return [*events, ("content_block_start", start)]

    def _stop(self) -> list[Event]:
        if not self.open:
            return []
        self.open = False
        return [("content_block_stop", {"index": len(self.blocks) - 1})]

    def start_text(self) -> list[Event]:
        return self._start({"type": "text", "text": ""})

    def feed(self, text: str, final: bool) -> list[Event]:
        """The events ``text`` adds (``final``: the output is whole: the last block stops)."""
        content, pieces = self.tools.feed(text, final) if self.tools else (text, [])
        events: list[Event] = []
        if content:
            if not (self.open and self.blocks[-1]["type"] == "text"):
                events += self.start_text()
            self.blocks[-1]["text"] += content
            delta = {"type": "text_delta", "text": content}
            events.append(("content_block_delta", {"index": len(self.blocks) - 1, "delta": delta}))
        for piece in pieces:
            if piece.name is not None:
                call_id = f"toolu_{self.token}_{piece.index}"
                block = {"type": "tool_use", "id": call_id, "name": piece.name, "json": ""}
                events += self._start(block)
                self.calls.append(len(self.blocks) - 1)
            at = self.calls[piece.index]
            self.blocks[at]["json"] += piece.arguments
            if piece.arguments:
                delta = {"type": "input_json_delta", "partial_json": piece.arguments}
                events.append(("content_block_delta", {"index": at, "delta": delta}))
        if final:
            if not self.blocks:  # no text and no call: an empty text block
                events += self.start_text()
            events += self._stop()
        return events

    def content(self) -> list[dict[str, Any]]:
        """The blocks as the message holds them (a call's ``input`` an object)."""
        out = []
        for block in self.blocks:
            if block["type"] == "tool_use":
                fields = {k: v for k, v in block.items() if k != "json"}
                out.append(fields | {"input": _input(block["json"])})
            else:
                out.append(dict(block))
        return out

    def stopped(
        self, reason: FinishReason | None, stop_reason: str | int | None
    ) -> tuple[str, str | None]:
        """A message that called ends with ``tool_use`` (unless cut by max_tokens)."""
        if self.calls and reason is not FinishReason.LENGTH:
            return "tool_use", None
        return stop(reason, stop_reason)


def whole(
    msg_id: str, model: str, plan: ToolPlan | None, done: Completion, usage: Usage
) -> dict[str, Any]:
    """A non-streamed message."""
    blocks = Blocks(msg_id, plan)
    blocks.feed(done.text, True)
    reason = blocks.stopped(done.finish_reason, done.stop_reason)
    return message(msg_id, model, blocks.content(), reason, usage)


class Framer:
    """message_start and a ping (the text block's start first when no tools are offered),
    the blocks' starts, deltas and stops, then message_delta (stop_reason, output tokens) and
    message_stop."""

    def __init__(self, msg_id: str, model: str, input_tokens: int, plan: ToolPlan | None = None):
        self.msg_id, self.model, self.input_tokens = msg_id, model, input_tokens
        self.blocks = Blocks(msg_id, plan)
        self.eager = plan is None
        self.started = False

    def _events(self, events: list[Event]) -> bytes:
        return b"".join(event(kind, {"type": kind, **doc}) for kind, doc in events)

    def head(self) -> bytes:
        self.started = True
        start = message(self.msg_id, self.model, [], (None, None), Usage(self.input_tokens, 0))
        events = [("message_start", {"message": start})]
        events += self.blocks.start_text() if self.eager else []
        return self._events([*events, ("ping", {})])

    def seen(self, delta: GenerateDelta) -> None:
        """A delta the prefill instance sent: the blocks it began are known here too."""
        if not self.started:
            self.head()
        self.chunk(delta)

    def chunk(self, delta: GenerateDelta) -> bytes:
        final = delta.finish_reason is not None
        events = self.blocks.feed(delta.text, final)
        if final:
            reason, sequence = self.blocks.stopped(delta.finish_reason, delta.stop_reason)
            tokens = delta.usage.completion_tokens if delta.usage else 0
            stopped = {"stop_reason": reason, "stop_sequence": sequence}
            events.append(("message_delta", {"delta": stopped, "usage": {"output_tokens": tokens}}))
            events.append(("message_stop", {}))
        return self._events(events)
