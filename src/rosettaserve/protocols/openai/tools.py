"""OpenAI chat's tools: ``tools`` / ``tool_choice`` / ``parallel_tool_calls`` (and the legacy
``functions`` / ``function_call``) read into the shared tool types, the conversation's tool
calls and results made ready for the chat template, and the answer's ``tool_calls``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from rosettaserve.core.errors import InvalidInput
from rosettaserve.core.generate import Completion, Fields, FinishReason, GenerateDelta
from rosettaserve.core.tools import ChoiceMode, ToolCall, ToolChoice, ToolSpec
from rosettaserve.protocols.tools import CallDelta, ToolStream, extract
from rosettaserve.protocols.tools.choice import ToolPlan, check_choice, check_tool


@dataclass(frozen=True, slots=True)
class ChatTools:
    """A chat request's tools as it sent them: the specs, the choice, and the tools in
    OpenAI's shape (what chat templates are written for)."""

    specs: tuple[ToolSpec, ...]
    choice: ToolChoice
    wire: tuple[dict[str, Any], ...]
    legacy: bool = False  # sent as ``functions``: answered with ``function_call``, one call


def read_tools(f: Fields) -> ChatTools:
    doc = f.doc
    if doc.get("tools") and doc.get("functions"):
        raise InvalidInput("'tools' and the legacy 'functions' may not both be set")
    if doc.get("functions"):
        items = _list(doc["functions"], "functions")
        wire: list[dict[str, Any]] = [
            {"type": "function", "function": _function(x, f"functions[{i}]")}
            for i, x in enumerate(items)
        ]
    else:
        wire = [_tool(x, f"tools[{i}]") for i, x in enumerate(_list(doc.get("tools"), "tools"))]
    specs = tuple(_spec(t["function"]) for t in wire)
    for i, spec in enumerate(specs):
        check_tool(spec, f"tools[{i}].function")
    key = "function_call" if doc.get("function_call") is not None else "tool_choice"
    choice = _choice(doc.get(key), key, f.boolean("parallel_tool_calls", True), bool(specs))
    check_choice(specs, choice, key)
    return ChatTools(specs, choice, tuple(wire), bool(doc.get("functions")))


def _list(value: Any, key: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise InvalidInput(f"'{key}' must be a list")
    return value


def _tool(item: Any, where: str) -> dict[str, Any]:
    if not isinstance(item, dict) or item.get("type") != "function":
        raise InvalidInput(f"'{where}' must be an object with 'type': 'function'")
    return {"type": "function", "function": _function(item.get("function"), f"{where}.function")}


def _function(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, dict) or not isinstance(value.get("name"), str):
        raise InvalidInput(f"'{where}' must be an object with a string 'name'")
    description = value.get("description")
    if description is not None and not isinstance(description, str):
        raise InvalidInput(f"'{where}.description' must be a string")
    return {k: v for k, v in value.items() if v is not None}


def _spec(function: dict[str, Any]) -> ToolSpec:
    return ToolSpec(
        function["name"], function.get("description") or "", function.get("parameters") or {}
    )


def _choice(value: Any, key: str, parallel: bool, has_tools: bool) -> ToolChoice:
    """OpenAI's default: ``auto`` with tools, ``none`` without."""
    if value is None:
        return ToolChoice(ChoiceMode.AUTO if has_tools else ChoiceMode.NONE, parallel=parallel)
    if isinstance(value, str) and value in ("none", "auto", "required"):
        if key == "function_call" and value == "required":
            raise InvalidInput("'function_call' must be 'none', 'auto' or {'name': ...}")
        return ToolChoice(ChoiceMode(value), parallel=parallel)
    named = value.get("function") if isinstance(value, dict) and key == "tool_choice" else value
    if key == "tool_choice" and (not isinstance(value, dict) or value.get("type") != "function"):
        named = None
    if not isinstance(named, dict) or not isinstance(named.get("name"), str):
        raise InvalidInput(
            f"'{key}' must be 'none', 'auto', 'required' or "
            "{'type': 'function', 'function': {'name': ...}}"
        )
    return ToolChoice(ChoiceMode.NAMED, named["name"], parallel)


# -- the conversation ---------------------------------------------------------------------------


def message_extras(i: int, message: dict[str, Any]) -> dict[str, Any]:
    """What a message carries beyond its role and content, as chat templates take it: an
    assistant's ``tool_calls`` (arguments as objects, as vLLM hands them to the template) and
    a tool result's ``tool_call_id``."""
    role = message.get("role")
    extras: dict[str, Any] = {}
    if role == "assistant" and message.get("tool_calls"):
        calls = message["tool_calls"]
        if not isinstance(calls, list):
            raise InvalidInput(f"'messages[{i}].tool_calls' must be a list")
        extras["tool_calls"] = [_past_call(i, k, c) for k, c in enumerate(calls)]
    if role == "tool":
        call_id = message.get("tool_call_id")
        if not isinstance(call_id, str) or not call_id:
            raise InvalidInput(f"'messages[{i}].tool_call_id' is required for a 'tool' message")
        extras["tool_call_id"] = call_id
    if isinstance(message.get("name"), str):
        extras["name"] = message["name"]
    return extras


def _past_call(i: int, k: int, call: Any) -> dict[str, Any]:
    where = f"messages[{i}].tool_calls[{k}]"
    function = call.get("function") if isinstance(call, dict) else None
    if not isinstance(function, dict) or not isinstance(function.get("name"), str):
        raise InvalidInput(f"'{where}' must have a 'function' with a string 'name'")
    arguments = function.get("arguments") or "{}"
    if isinstance(arguments, str):
        try:
            arguments = orjson.loads(arguments)
        except orjson.JSONDecodeError:
            raise InvalidInput(f"'{where}.function.arguments' is not JSON") from None
    return {
        "id": call.get("id") or "",
        "type": "function",
        "function": {"name": function["name"], "arguments": arguments},
    }


# -- the answer ---------------------------------------------------------------------------------


def wire_call(call: ToolCall) -> dict[str, Any]:
    return {
        "id": call.id,
        "type": "function",
        "function": {"name": call.name, "arguments": call.arguments},
    }


def answer_choices(
    body: dict[str, Any], completions: list[Completion], plan: ToolPlan, legacy: bool = False
) -> None:
    """A non-streamed answer's messages with the calls its texts hold (``body`` in place);
    ``finish_reason: tool_calls`` when it called (not ``length``: a call may be cut short).
    ``legacy``: OpenAI's ``function_call`` shape, the first call only."""
    assert plan.parser is not None
    for choice, completion in zip(body["choices"], completions, strict=True):
        found = extract(plan.parser, completion.text)
        choice["message"]["content"] = found.content
        if not found.calls:
            continue
        if legacy:
            first = found.calls[0]
            choice["message"]["function_call"] = {"name": first.name, "arguments": first.arguments}
        else:
            choice["message"]["tool_calls"] = [wire_call(c) for c in found.calls]
        if plan.ends_with_tool_calls and completion.finish_reason is not FinishReason.LENGTH:
            choice["finish_reason"] = "function_call" if legacy else "tool_calls"


class ToolDeltas:
    """A streamed answer's calls: one ToolStream per choice."""

    def __init__(self, plan: ToolPlan) -> None:
        assert plan.parser is not None
        self.plan = plan
        self.parser = plan.parser
        self.streams: dict[int, ToolStream] = {}

    def feed(self, delta: GenerateDelta) -> tuple[str, list[CallDelta], bool]:
        """The delta's content, its call pieces, and whether its choice ends with its calls
        (not when the output was cut short: its last call may be cut too)."""
        stream = self.streams.setdefault(delta.index, ToolStream(self.parser))
        content, calls = stream.feed(delta.text, delta.finish_reason is not None)
        ends = self.plan.ends_with_tool_calls and delta.finish_reason is not FinishReason.LENGTH
        return content, calls, stream.called and ends


def delta_calls(pieces: list[CallDelta], legacy: bool) -> dict[str, Any]:
    """What a stream's delta carries of its calls: ``tool_calls`` pieces, or (``legacy``) the
    first call's ``function_call`` pieces."""
    if not legacy:
        return {"tool_calls": [wire_delta(c) for c in pieces]} if pieces else {}
    for piece in pieces:
        if piece.index == 0:
            named = {"name": piece.name} if piece.id is not None else {}
            return {"function_call": named | {"arguments": piece.arguments}}
    return {}


def wire_delta(piece: CallDelta) -> dict[str, Any]:
    function: dict[str, Any] = {"arguments": piece.arguments}
    out: dict[str, Any] = {"index": piece.index}
    if piece.id is not None:
        out |= {"id": piece.id, "type": "function"}
        function = {"name": piece.name, "arguments": piece.arguments}
    return out | {"function": function}
