"""``tool_choice: required`` and a named function on a real server: the output is constrained
to the schema protocols/tools/choice.py builds, so the answer always holds a call whose
arguments validate against the function's schema.

The engine's grammar masks (runtimes/llm/grammar.py) make the output follow the schema:
without them the tiny model writes its hermes habit instead of the JSON asked, and these tests
fail."""

from __future__ import annotations

import json
from typing import Any

import jsonschema
import openai
import pytest

from tests.integration.tools_support import MODEL, oai, tools_server

__all__ = ["oai", "tools_server"]  # the fixtures
CITY: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {
            "type": "object",
            "properties": {"city": {"enum": ["Paris", "Oslo"]}},
            "required": ["city"],
            "additionalProperties": False,
        },
    },
}
CLOCK: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "now",
        "parameters": {
            "type": "object",
            "properties": {"zone": {"enum": ["UTC", "CET"]}},
            "required": ["zone"],
            "additionalProperties": False,
        },
    },
}
MESSAGES: list[dict[str, Any]] = [{"role": "user", "content": "What is the weather in Oslo?"}]
SCHEMAS = {t["function"]["name"]: t["function"]["parameters"] for t in (CITY, CLOCK)}


def ask(client: openai.OpenAI, **fields: Any) -> Any:
    request: dict[str, Any] = {"model": MODEL, "messages": MESSAGES, "tools": [CITY, CLOCK]}
    return client.chat.completions.create(
        **request, **({"temperature": 0, "max_tokens": 120} | fields)
    )


def valid_calls(choice: Any) -> list[tuple[str, Any]]:
    """The choice's calls, each validated against its function's schema; the last one of an
    answer cut by max_tokens (``length``) may be cut too, and is left out."""
    calls = choice.message.tool_calls or []
    if choice.finish_reason == "length":
        calls = calls[:-1]
    found = []
    for call in calls:
        arguments = json.loads(call.function.arguments)
        jsonschema.validate(arguments, SCHEMAS[call.function.name])
        found.append((call.function.name, arguments))
    return found


@pytest.mark.parametrize("parallel", [True, False])
def test_required_always_calls_with_valid_arguments(oai: openai.OpenAI, parallel: bool) -> None:
    answer = ask(oai, tool_choice="required", parallel_tool_calls=parallel, n=2, temperature=1.0)
    for choice in answer.choices:
        found = valid_calls(choice)
        assert found
        assert parallel or len(found) == 1
        assert choice.finish_reason in ("tool_calls", "length")
        assert parallel or choice.finish_reason == "tool_calls"  # one call: the list closes


def test_a_named_function_is_called_with_valid_arguments(oai: openai.OpenAI) -> None:
    choice = {"type": "function", "function": {"name": "now"}}
    answer = ask(oai, tool_choice=choice)
    assert [name for name, _ in valid_calls(answer.choices[0])] == ["now"]
    assert answer.choices[0].finish_reason == "stop"  # a named call ends as OpenAI's does


def test_required_streamed_equals_non_streamed(oai: openai.OpenAI) -> None:
    whole = ask(oai, tool_choice="required")
    pieces: list[list[str]] = []
    for chunk in ask(oai, tool_choice="required", stream=True):
        for piece in chunk.choices[0].delta.tool_calls or [] if chunk.choices else []:
            if piece.index == len(pieces):
                pieces.append([piece.function.name, ""])
            pieces[piece.index][1] += piece.function.arguments or ""
    want = [(c.function.name, c.function.arguments) for c in whole.choices[0].message.tool_calls]
    assert [tuple(p) for p in pieces] == want
    assert valid_calls(whole.choices[0])
