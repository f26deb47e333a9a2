"""Anthropic Messages requests (``POST /v1/messages``, ``/v1/messages/count_tokens``) -> the
chat messages and GenerateRequest.

``system`` (a string or text blocks) is a system message first; a message's content is a
string or blocks: ``text``, ``tool_use`` (an assistant message's ``tool_calls``, its ``input``
as the arguments' JSON text) and ``tool_result`` (a ``tool`` message), rendered by the model's
chat template as the chat completion of the same messages would be. ``thinking`` blocks sent
back are not rendered. Fields not built are refused with a 400 unless neutral; fields that
change nothing of the answer (``metadata``, ``service_tier``, ``cache_control``, ...) and
fields the API does not name are accepted.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

from rosettaserve.core.errors import InvalidInput
from rosettaserve.core.generate import Fields, GenerateRequest
from rosettaserve.core.sampling_fields import Field, SamplingTable, read_sampling
from rosettaserve.core.structured_output import OutputConstraint, json_schema
from rosettaserve.core.tools import ChoiceMode, ToolChoice, ToolSpec
from rosettaserve.protocols.tools.choice import check_choice, check_tool

ROLES = ("user", "assistant")
SKIPPED_BLOCKS = ("thinking", "redacted_thinking")
NOT_BUILT: Mapping[str, tuple[Any, ...]] = {
    "thinking": ({"type": "disabled"},),
    "container": (),
    "mcp_servers": (),
    "context_management": (),
}
SAMPLING = SamplingTable(
    fields=(
        Field("max_new_tokens", ("max_tokens",), "int", 1),
        Field("temperature", ("temperature",), "number", 0.0, 1.0),
        Field("top_p", ("top_p",), "number", 0.0, 1.0, lo_open=True),
        Field("top_k", ("top_k",), "int", 0),  # 0: off
        Field("stop", ("stop_sequences",), "strings"),
    ),
)


@dataclass
class MessagesRequest:
    model: str
    generate: GenerateRequest
    messages: list[dict[str, Any]]
    tools: tuple[ToolSpec, ...] = ()
    tool_choice: ToolChoice = field(default_factory=ToolChoice)


def model_name(doc: Mapping[str, Any]) -> str:
    model = doc.get("model")
    if not isinstance(model, str) or not model:
        raise InvalidInput("model: Field required (the name of a served model)")
    return model


def messages_request(doc: dict[str, Any], max_stop: int, counting: bool = False) -> MessagesRequest:
    """The request (its prompt still unset); ``counting``: for count_tokens (no max_tokens)."""
    f = Fields(doc)
    model = model_name(doc)
    if not counting and not f.has("max_tokens"):
        raise InvalidInput("max_tokens: Field required")
    for key in sorted(doc.keys() & NOT_BUILT.keys()):
        if doc[key] and doc[key] not in NOT_BUILT[key]:
            raise InvalidInput(f"{key}: not supported by this server")
    params = read_sampling(f, SAMPLING, max_stop)
    params.constraint = output_constraint(f.object("output_config"))
    request = GenerateRequest(sampling=params, stream=f.boolean("stream", False))
    request.add_special_tokens = False  # the chat template's text has them (as chat's default)
    tools, choice = tools_of(doc.get("tools"), doc.get("tool_choice"))
    messages = system_messages(doc.get("system")) + chat_messages(doc.get("messages"))
    return MessagesRequest(model, request, messages, tools, choice)


def output_constraint(config: Fields) -> OutputConstraint | None:
    """``output_config.format`` (``{type: json_schema, schema}``); ``effort`` is not built."""
    if config.doc.get("effort") is not None:
        raise InvalidInput("output_config.effort: not supported by this server")
    fmt = config.doc.get("format")
    if fmt is None:
        return None
    if not isinstance(fmt, dict) or fmt.get("type") != "json_schema":
        raise InvalidInput("output_config.format: must be {type: json_schema, schema}")
    if not isinstance(fmt.get("schema"), dict):
        raise InvalidInput("output_config.format.schema: must be a JSON schema object")
    return json_schema(fmt["schema"], "output_config.format.schema")  # (its key order)


# -- tools ---------------------------------------------------------------------------------------


def tools_of(tools: Any, choice: Any) -> tuple[tuple[ToolSpec, ...], ToolChoice]:
    """``tools`` (``{name, description, input_schema}``) and ``tool_choice`` (``{type: auto |
    any | tool | none, name, disable_parallel_tool_use}``; auto by default), checked as chat's
    are."""
    if tools is not None and not isinstance(tools, list):
        raise InvalidInput("tools: must be a list of tools")
    specs = tuple(_tool(i, t) for i, t in enumerate(tools or []))
    for i, spec in enumerate(specs):
        check_tool(spec, f"tools.{i}")
    if choice is None:
        return specs, ToolChoice()
    kind = choice.get("type") if isinstance(choice, dict) else None
    modes = {"auto": ChoiceMode.AUTO, "any": ChoiceMode.REQUIRED, "tool": ChoiceMode.NAMED}
    modes["none"] = ChoiceMode.NONE
    if kind not in modes:
        raise InvalidInput("tool_choice: must be {type: auto | any | tool | none}")
    assert isinstance(choice, dict)
    if kind == "any" and not specs:
        raise InvalidInput("tool_choice: any needs tools")
    parallel = not choice.get("disable_parallel_tool_use", False)
    name = choice.get("name") if kind == "tool" else ""
    if kind == "tool" and not any(s.name == name for s in specs):
        raise InvalidInput(f"tool_choice: names tool {name!r}, which tools lacks")
    picked = ToolChoice(modes[kind], str(name), parallel)
    check_choice(specs, picked, "tool_choice")
    return specs, picked


def _tool(i: int, tool: Any) -> ToolSpec:
    if not isinstance(tool, dict) or not isinstance(tool.get("name"), str) or not tool["name"]:
        raise InvalidInput(f"tools.{i}: needs a name")
    kind = tool.get("type", "custom")
    schema = tool.get("input_schema")
    if kind not in ("custom", None) or not isinstance(schema, dict):
        raise InvalidInput(f"tools.{i}: only client tools with an input_schema are supported")
    return ToolSpec(tool["name"], str(tool.get("description") or ""), schema)


# -- messages ------------------------------------------------------------------------------------


def system_messages(system: Any) -> list[dict[str, Any]]:
    if not system:
        return []
    if isinstance(system, str):
        return [{"role": "system", "content": system}]
    if isinstance(system, list):
        return [{"role": "system", "content": _texts("system", system)}]
    raise InvalidInput("system: must be a string or a list of text blocks")


def _texts(where: str, blocks: list[Any]) -> str:
    texts = []
    for i, block in enumerate(blocks):
        if not isinstance(block, dict) or block.get("type") != "text":
            raise InvalidInput(f"{where}.{i}: must be a text block")
        if not isinstance(block.get("text"), str):
            raise InvalidInput(f"{where}.{i}.text: must be a string")
        texts.append(block["text"])
    return "".join(texts)


def chat_messages(value: Any) -> list[dict[str, Any]]:
    if not isinstance(value, list) or not value:
        raise InvalidInput("messages: must be a non-empty list of {role, content}")
    out: list[dict[str, Any]] = []
    for i, message in enumerate(value):
        if not isinstance(message, dict) or message.get("role") not in ROLES:
            raise InvalidInput(f"messages.{i}.role: must be user or assistant")
        content = message.get("content")
        if isinstance(content, str):
            out.append({"role": message["role"], "content": content})
        elif isinstance(content, list):
            out += _blocks(f"messages.{i}.content", message["role"], content)
        else:
            raise InvalidInput(f"messages.{i}.content: must be a string or a list of blocks")
    return out


def _blocks(where: str, role: str, blocks: list[Any]) -> list[dict[str, Any]]:
    """One message's blocks: its tool results first (each a tool message), then its text and
    tool calls (one message)."""
    results: list[dict[str, Any]] = []
    texts: list[str] = []
    calls: list[dict[str, Any]] = []
    for i, block in enumerate(blocks):
        kind = block.get("type") if isinstance(block, dict) else None
        if kind == "text" and isinstance(block.get("text"), str):
            texts.append(block["text"])
        elif kind == "tool_use" and role == "assistant":
            calls.append(_tool_use(f"{where}.{i}", block))
        elif kind == "tool_result" and role == "user":
            results.append(_tool_result(f"{where}.{i}", block))
        elif kind not in SKIPPED_BLOCKS:
            raise InvalidInput(f"{where}.{i}: a {kind!r} block is not supported here")
    said: dict[str, Any] = {"role": role, "content": "".join(texts)}
    if calls:
        said["tool_calls"] = calls
    return results + ([said] if texts or calls or not results else [])


def _tool_use(where: str, block: Mapping[str, Any]) -> dict[str, Any]:
    call_id, name, arguments = block.get("id"), block.get("name"), block.get("input")
    if not isinstance(call_id, str) or not isinstance(name, str) or not isinstance(arguments, dict):
        raise InvalidInput(f"{where}: a tool_use block needs a string id and name, an object input")
    text = orjson.dumps(arguments).decode()
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": text}}


def _tool_result(where: str, block: Mapping[str, Any]) -> dict[str, Any]:
    call_id, content = block.get("tool_use_id"), block.get("content")
    if not isinstance(call_id, str):
        raise InvalidInput(f"{where}.tool_use_id: must be a string")
    if content is None or isinstance(content, str):
        text = content or ""
    elif isinstance(content, list):
        text = _texts(f"{where}.content", content)
    else:
        raise InvalidInput(f"{where}.content: must be a string or a list of text blocks")
    return {"role": "tool", "tool_call_id": call_id, "content": text}
