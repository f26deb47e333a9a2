"""Tools over the Responses and Messages APIs on a real server, with the official `openai` and
`anthropic` SDKs and the tools model (it calls get_weather {"city": "Paris"} when tools are
offered, and answers "It is sunny." after a tool result): the calls as items and blocks,
streamed equal to non-streamed, the tool loops, and the same calls as chat's."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import anthropic
import jsonschema
import openai
import pytest

from tests.integration.test_chat_tools_agents import run_agent
from tests.integration.tools_support import MODEL, WEATHER, oai, tools_server
from tests.serverproc import ServerProcess

__all__ = ["oai", "tools_server"]  # the fixtures

QUESTION = "What is the weather in Oslo?"
FUNCTION = WEATHER["function"]
RESPONSES_TOOL: Any = {"type": "function", **FUNCTION}  # Responses' flat shape
MESSAGES_TOOL: Any = {
    "name": FUNCTION["name"],
    "description": FUNCTION["description"],
    "input_schema": FUNCTION["parameters"],
}
GREEDY: dict[str, Any] = {"temperature": 0}
PARIS = ("get_weather", {"city": "Paris"})


@pytest.fixture(scope="module")
def claude(tools_server: ServerProcess) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=tools_server.http_url, api_key="unused", max_retries=0)


def responses_calls(output: Any) -> list[tuple[str, Any]]:
    return [(i.name, json.loads(i.arguments)) for i in output if i.type == "function_call"]


def item_fields(output: Any) -> list[tuple[Any, ...]]:
    """What the output items say, without their ids (each response has its own)."""
    return [
        (i.type, i.status, getattr(i, "name", None), getattr(i, "arguments", None),
         [c.text for c in getattr(i, "content", [])])
        for i in output
    ]  # fmt: skip


def test_responses_call_is_a_function_call_item(oai: Any) -> None:
    fields: dict[str, Any] = {"model": MODEL, "input": QUESTION, "tools": [RESPONSES_TOOL]}
    done = oai.responses.create(**fields, max_output_tokens=80, **GREEDY)
    assert done.status == "completed"
    assert responses_calls(done.output) == [PARIS]
    call = next(i for i in done.output if i.type == "function_call")
    assert call.id is not None
    assert call.id.startswith("fc_")
    assert call.call_id.startswith("call_")
    assert call.status == "completed"
    assert done.tools[0].name == "get_weather"
    assert done.tool_choice == "auto"
    with oai.responses.stream(**fields, max_output_tokens=80, **GREEDY) as stream:
        kinds = [event.type for event in stream]
        streamed = stream.get_final_response()
    assert item_fields(streamed.output) == item_fields(done.output)
    assert "response.function_call_arguments.delta" in kinds
    assert kinds.count("response.output_item.added") == len(done.output)
    assert kinds.count("response.output_item.done") == len(done.output)
    raw = list(oai.responses.create(**fields, max_output_tokens=80, stream=True, **GREEDY))
    final = raw[-1].response
    assert item_fields(final.output) == item_fields(done.output)


def tool_loop_input(call: Any) -> list[Any]:
    output = {"type": "function_call_output", "call_id": call.call_id, "output": "sunny"}
    return [{"role": "user", "content": QUESTION}, call.model_dump(exclude_none=True), output]


def test_responses_tool_loop(oai: Any) -> None:
    fields: dict[str, Any] = {"model": MODEL, "tools": [RESPONSES_TOOL], "max_output_tokens": 80}
    first = oai.responses.create(input=QUESTION, **fields, **GREEDY)
    call = next(i for i in first.output if i.type == "function_call")
    answer = oai.responses.create(input=tool_loop_input(call), **fields, **GREEDY)
    assert answer.output_text == "It is sunny."
    assert responses_calls(answer.output) == []
    output = {"type": "function_call_output", "call_id": call.call_id, "output": "sunny"}
    followed = oai.responses.create(
        input=[output], previous_response_id=first.id, **fields, **GREEDY
    )
    assert followed.output_text == "It is sunny."
    assert followed.usage == answer.usage  # the same prompt as the whole conversation's


def test_responses_required_and_named_calls_follow_the_schema(oai: Any) -> None:
    schema = FUNCTION["parameters"]
    for choice in ("required", {"type": "function", "name": "get_weather"}):
        done = oai.responses.create(
            model=MODEL,
            input="Hello",
            tools=[RESPONSES_TOOL],
            tool_choice=choice,
            max_output_tokens=60,
            **GREEDY,
        )
        (name, arguments), *_ = responses_calls(done.output)
        assert name == "get_weather"
        jsonschema.validate(arguments, schema)


def test_responses_tools_refused_without_a_parser(oai: Any) -> None:
    with pytest.raises(openai.BadRequestError) as bad:
        oai.responses.create(model="tiny_llama", input="x", tools=[RESPONSES_TOOL])
    assert "has no tool parser" in str(bad.value)


# -- Messages ------------------------------------------------------------------------------------


def message_fields(message: Any) -> dict[str, Any]:
    """The message without its ids (each message has its own)."""
    doc: dict[str, Any] = message.model_dump(exclude={"id"})
    for block in doc["content"]:
        block.pop("id", None)
    return doc


def tool_uses(message: Any) -> list[tuple[str, Any]]:
    return [(b.name, b.input) for b in message.content if b.type == "tool_use"]


def test_messages_call_is_a_tool_use_block(claude: Any) -> None:
    fields: dict[str, Any] = {"model": MODEL, "max_tokens": 80, "tools": [MESSAGES_TOOL]}
    fields |= {"messages": [{"role": "user", "content": QUESTION}], "extra_body": GREEDY}
    done = claude.messages.create(**fields)
    assert done.stop_reason == "tool_use"
    assert tool_uses(done) == [PARIS]
    block = next(b for b in done.content if b.type == "tool_use")
    assert block.id.startswith("toolu_")
    with claude.messages.stream(**fields) as stream:
        kinds = [event.type for event in stream]
        streamed = stream.get_final_message()
    assert message_fields(streamed) == message_fields(done)
    assert "input_json" in kinds  # the SDK's event for an input_json_delta
    counted = claude.messages.count_tokens(
        model=MODEL, tools=[MESSAGES_TOOL], messages=fields["messages"]
    )
    assert counted.input_tokens == done.usage.input_tokens


def test_messages_tool_loop(claude: Any) -> None:
    fields: dict[str, Any] = {"model": MODEL, "max_tokens": 80, "tools": [MESSAGES_TOOL]}
    asked: list[Any] = [{"role": "user", "content": QUESTION}]
    first = claude.messages.create(messages=asked, **fields, extra_body=GREEDY)
    block = next(b for b in first.content if b.type == "tool_use")
    result = {"type": "tool_result", "tool_use_id": block.id, "content": "sunny"}
    turns = [*asked, {"role": "assistant", "content": first.content}]
    turns.append({"role": "user", "content": [result]})
    answer = claude.messages.create(messages=turns, **fields, extra_body=GREEDY)
    assert [b.text for b in answer.content if b.type == "text"] == ["It is sunny."]
    assert answer.stop_reason == "end_turn"


# -- the families agree --------------------------------------------------------------------------


CHOICES: list[tuple[Any, Any, Any]] = [  # (chat, Responses, Messages)
    ("auto", "auto", {"type": "auto"}),
    ("required", "required", {"type": "any"}),
    (
        {"type": "function", "function": {"name": "get_weather"}},
        {"type": "function", "name": "get_weather"},
        {"type": "tool", "name": "get_weather"},
    ),
]


@pytest.mark.parametrize("choices", CHOICES, ids=["auto", "required", "named"])
def test_the_families_make_the_same_call(
    oai: Any, claude: Any, choices: tuple[Any, Any, Any]
) -> None:
    chat_choice, responses_choice, messages_choice = choices
    said = [{"role": "user", "content": "Hello"}]
    chat = oai.chat.completions.create(
        model=MODEL, messages=said, tools=[WEATHER], tool_choice=chat_choice,
        max_tokens=60, **GREEDY,
    ).choices[0].message  # fmt: skip
    chat_calls = [
        (c.function.name, json.loads(c.function.arguments)) for c in chat.tool_calls or []
    ]
    assert chat_calls
    response = oai.responses.create(
        model=MODEL, input=said, tools=[RESPONSES_TOOL], tool_choice=responses_choice,
        max_output_tokens=60, **GREEDY,
    )  # fmt: skip
    message = claude.messages.create(
        model=MODEL, messages=said, tools=[MESSAGES_TOOL], tool_choice=messages_choice,
        max_tokens=60, extra_body=GREEDY,
    )  # fmt: skip
    assert responses_calls(response.output) == chat_calls
    assert tool_uses(message) == chat_calls
    for _, arguments in chat_calls:
        jsonschema.validate(arguments, FUNCTION["parameters"])


# -- openai-agents with its default model: the Responses API -------------------------------------


@pytest.mark.parametrize("stream", [False, True])
def test_an_agent_on_the_responses_api_runs_its_tool_loop(
    tools_server: ServerProcess, stream: bool
) -> None:
    url = tools_server.http_url + "/v1"
    answer, asked = asyncio.run(run_agent(url, QUESTION, stream, responses=True))
    assert asked == ["Paris"]  # the call the model was taught, run by the SDK
    assert answer == "It is sunny."  # the model's answer to the tool's result
