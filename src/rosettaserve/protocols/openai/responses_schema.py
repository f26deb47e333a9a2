"""OpenAI Responses requests (``POST /v1/responses``) -> the chat messages and GenerateRequest.

``input`` is a string (one user message) or a list of items: messages (``role`` and a string or
``input_text`` / ``output_text`` parts), ``function_call`` items (an assistant message's
``tool_calls``) and ``function_call_output`` items (a ``tool`` message), rendered by the model's
chat template as the chat completion of the same messages would be; ``instructions`` is a
system message first. Fields not built are refused with a 400 unless neutral (``NOT_BUILT``);
fields that change nothing of the answer (``user``, ``metadata``, ``service_tier``, ...) and
fields OpenAI's API does not name are accepted, as vLLM accepts them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from rosettaserve.core.errors import InvalidInput
from rosettaserve.core.generate import SEED_MAX, Fields, GenerateRequest
from rosettaserve.core.sampling_fields import Field, SamplingTable, read_sampling
from rosettaserve.core.structured_output import OutputConstraint, json_object, json_schema
from rosettaserve.core.tools import ChoiceMode, ToolChoice, ToolSpec
from rosettaserve.protocols.openai.schema import model_name, read_priority, refuse_not_built
from rosettaserve.protocols.tools.choice import check_choice, check_tool

ROLES = ("user", "system", "developer", "assistant")
TEXT_PARTS = ("input_text", "output_text", "text")
SKIPPED_ITEMS = ("reasoning",)  # items an agent sends back that no chat template renders
MAX_METADATA = 16  # OpenAI's: up to 16 pairs
# Not built: accepted only when absent, empty or one of the neutral values listed.
NOT_BUILT: Mapping[str, tuple[Any, ...]] = {
    "background": (),
    "conversation": (),
    "include": (),
    "prompt": (),
    "reasoning": ({"effort": None}, {"summary": None}, {"effort": None, "summary": None}),
    "top_logprobs": (),
    "truncation": ("disabled",),
    "context_management": (),
}
SAMPLING = SamplingTable(
    fields=(
        Field("max_new_tokens", ("max_output_tokens",), "int", 1),
        Field("temperature", ("temperature",), "number", 0.0, 2.0),
        Field("top_p", ("top_p",), "number", 0.0, 1.0, lo_open=True),
        Field("top_k", ("top_k",), "int", -1),  # vLLM's extra
        Field("seed", ("seed",), "int", 0, SEED_MAX),  # vLLM's extra
    ),
)


@dataclass
class ResponsesRequest:
    model: str
    generate: GenerateRequest
    input: list[dict[str, Any]]  # this request's input as chat messages (no instructions)
    instructions: str | None = None
    previous_response_id: str | None = None
    store: bool = True
    metadata: dict[str, str] = field(default_factory=dict)
    text_format: dict[str, Any] = field(default_factory=lambda: {"type": "text"})
    tools: tuple[ToolSpec, ...] = ()
    tool_choice: ToolChoice = field(default_factory=ToolChoice)
    echo: dict[str, Any] = field(default_factory=dict)  # the request's settings, as answered

    def messages(self, history: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """What the chat template gets: the instructions, an earlier exchange, this input."""
        system = [{"role": "system", "content": self.instructions}] if self.instructions else []
        return [*system, *history, *self.input]


def responses_request(doc: dict[str, Any], max_stop: int) -> ResponsesRequest:
    f = Fields(doc)
    model = model_name(doc)
    refuse_not_built(f, NOT_BUILT)
    params = read_sampling(f, SAMPLING, max_stop)
    text_format = _text_format(f.object("text"))
    params.constraint = constraint(text_format)
    request = GenerateRequest(sampling=params, stream=f.boolean("stream", False))
    request.priority = read_priority(f)  # vLLM's field, as on chat
    request.add_special_tokens = False  # the chat template's text has them (as chat's default)
    tools, choice = tools_of(
        doc.get("tools"), doc.get("tool_choice"), f.boolean("parallel_tool_calls", True)
    )
    out = ResponsesRequest(
        model,
        request,
        input_messages(doc.get("input")),
        instructions=f.string("instructions") or None,
        previous_response_id=f.string("previous_response_id") or None,
        store=f.boolean("store", True),
        metadata=metadata(doc.get("metadata")),
        text_format=text_format,
        tools=tools,
        tool_choice=choice,
    )
    out.echo = {
        "max_output_tokens": params.max_new_tokens,
        "temperature": doc.get("temperature", 1.0),
        "top_p": doc.get("top_p", 1.0),
        "parallel_tool_calls": choice.parallel,
        "user": f.string("user"),
    }
    return out


def metadata(value: Any) -> dict[str, str]:
    if value is None:
        return {}
    if (
        not isinstance(value, dict)
        or len(value) > MAX_METADATA
        or not all(isinstance(v, str) for v in value.values())
    ):
        raise InvalidInput(f"'metadata' must be an object of up to {MAX_METADATA} string values")
    return dict(value)


# -- text.format ---------------------------------------------------------------------------------


def _text_format(text: Fields) -> dict[str, Any]:
    fmt = text.doc.get("format")
    if fmt is None:
        return {"type": "text"}
    if not isinstance(fmt, dict) or fmt.get("type") not in ("text", "json_object", "json_schema"):
        raise InvalidInput("'text.format.type' must be one of text, json_object, json_schema")
    if fmt["type"] == "json_schema":
        if not isinstance(fmt.get("schema"), dict):
            raise InvalidInput("'text.format.schema' must be a JSON schema object")
        if not isinstance(fmt.get("name"), str) or not fmt["name"]:
            raise InvalidInput("'text.format.name' must be a non-empty string")
    return dict(fmt)


def constraint(fmt: Mapping[str, Any]) -> OutputConstraint | None:
    """What ``text.format`` asks the output to match (None: free text)."""
    if fmt["type"] == "json_object":
        return json_object()
    if fmt["type"] == "json_schema":  # in its own key order, as chat's response_format
        return json_schema(fmt["schema"], "text.format.schema")
    return None


# -- tools ---------------------------------------------------------------------------------------


def tools_of(
    tools: Any, choice: Any, parallel: bool = True
) -> tuple[tuple[ToolSpec, ...], ToolChoice]:
    """``tools`` (function tools: ``{type: function, name, description, parameters, strict}``)
    and ``tool_choice`` (none | auto | required | ``{type: function, name}``; auto by default),
    checked as chat's are."""
    if tools is not None and not isinstance(tools, list):
        raise InvalidInput("'tools' must be a list of function tools")
    specs = tuple(_tool(i, t) for i, t in enumerate(tools or []))
    for i, spec in enumerate(specs):
        check_tool(spec, f"tools[{i}]")
    if choice is None or choice in ("auto", "none", "required"):
        picked = ToolChoice(ChoiceMode(choice or "auto"), parallel=parallel)
    elif isinstance(choice, dict) and choice.get("type") == "function":
        picked = ToolChoice(ChoiceMode.NAMED, str(choice.get("name")), parallel)
    else:
        raise InvalidInput("'tool_choice' must be none, auto, required or {type: function, name}")
    check_choice(specs, picked, "tool_choice")
    return specs, picked


def _tool(i: int, tool: Any) -> ToolSpec:
    if not isinstance(tool, dict) or tool.get("type") != "function":
        raise InvalidInput(f"'tools[{i}]' must be a function tool ({{type: function, name}})")
    name, parameters = tool.get("name"), tool.get("parameters") or {}
    if not isinstance(name, str) or not name or not isinstance(parameters, dict):
        raise InvalidInput(f"'tools[{i}]' needs a 'name' and an object 'parameters'")
    return ToolSpec(name, str(tool.get("description") or ""), parameters)


# -- input items ---------------------------------------------------------------------------------


def input_messages(value: Any) -> list[dict[str, Any]]:
    """``input`` as the chat messages the template renders."""
    if isinstance(value, str):
        return [{"role": "user", "content": value}]
    if not isinstance(value, list) or not value:
        raise InvalidInput("'input' must be a string or a non-empty list of input items")
    messages: list[dict[str, Any]] = []
    for i, item in enumerate(value):
        if not isinstance(item, dict):
            raise InvalidInput(f"'input[{i}]' must be an object")
        kind = item.get("type", "message")
        if kind == "message":
            messages.append(_message(i, item))
        elif kind == "function_call":
            _function_call(i, item, messages)
        elif kind == "function_call_output":
            messages.append(_function_output(i, item))
        elif kind not in SKIPPED_ITEMS:
            raise InvalidInput(f"'input[{i}].type' {kind!r} is not supported by this server")
    return messages


def _message(i: int, item: Mapping[str, Any]) -> dict[str, Any]:
    role = item.get("role")
    if role not in ROLES:
        raise InvalidInput(f"'input[{i}].role' must be one of {', '.join(ROLES)}, got {role!r}")
    return {"role": role, "content": _content(i, item.get("content"))}


def _content(i: int, content: Any) -> str:
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise InvalidInput(f"'input[{i}].content' must be a string or a list of text parts")
    texts = []
    for part in content:
        if not isinstance(part, dict) or part.get("type") not in TEXT_PARTS:
            kind = part.get("type") if isinstance(part, dict) else part
            raise InvalidInput(
                f"'input[{i}].content' part {kind!r} is not supported: text parts only "
                "(input_text, output_text)"
            )
        if not isinstance(part.get("text"), str):
            raise InvalidInput(f"'input[{i}].content' text parts need a string 'text'")
        texts.append(part["text"])
    return "".join(texts)


def _function_call(i: int, item: Mapping[str, Any], messages: list[dict[str, Any]]) -> None:
    """A call the model made earlier: the calls after an assistant message (the output items of
    one turn, as a kept response's are) join it, as the calls in a row do."""
    call_id, name, arguments = item.get("call_id"), item.get("name"), item.get("arguments")
    if not all(isinstance(v, str) for v in (call_id, name, arguments)):
        raise InvalidInput(f"'input[{i}]' (function_call) needs string call_id, name, arguments")
    function = {"name": name, "arguments": arguments or "{}"}  # a call without arguments
    call = {"id": call_id, "type": "function", "function": function}
    last = messages[-1] if messages else None
    if last is not None and last["role"] == "assistant":
        last.setdefault("tool_calls", []).append(call)
    else:
        messages.append({"role": "assistant", "content": "", "tool_calls": [call]})


def _function_output(i: int, item: Mapping[str, Any]) -> dict[str, Any]:
    call_id, output = item.get("call_id"), item.get("output")
    if not isinstance(call_id, str):
        raise InvalidInput(f"'input[{i}]' (function_call_output) needs a string call_id")
    text = output if isinstance(output, str) else _content(i, output)
    return {"role": "tool", "tool_call_id": call_id, "content": text}
