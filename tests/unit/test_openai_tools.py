"""OpenAI chat's tools: the request read (and its 400s), the constraint built as vLLM builds
it, the conversation's calls and results for the template, and the answer's calls, streamed
chunk by chunk as the non-streamed answer has them."""

from __future__ import annotations

import json
from typing import Any

import jsonschema
import orjson
import pytest

from rosettaserve.core.errors import InvalidInput
from rosettaserve.core.generate import Completion, FinishReason, GenerateDelta, Usage
from rosettaserve.core.structured_output import ConstraintKind
from rosettaserve.core.tools import ChoiceMode
from rosettaserve.protocols.openai import convert, schema, tools
from rosettaserve.protocols.openai.rest import ChatFramer, _tool_plan
from rosettaserve.protocols.tools.choice import ToolPlan, tool_plan

WEATHER: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "unit": {"$ref": "#/$defs/unit"}},
            "required": ["city"],
            "$defs": {"unit": {"enum": ["celsius", "fahrenheit"]}},
        },
    },
}
NOW: dict[str, Any] = {"type": "function", "function": {"name": "now"}}
MESSAGES = [{"role": "user", "content": "weather in Paris?"}]
HERMES = {"tool_parser": "hermes"}


def chat(**fields: Any) -> schema.OpenAIRequest:
    doc = {"model": "m", "messages": MESSAGES, **fields}
    return schema.chat_request(doc, 4, 4)[0]


def plan_of(options: dict[str, Any] | None = None, **fields: Any) -> ToolPlan:
    oa = chat(**fields)
    plan = _tool_plan(oa, options if options is not None else HERMES, "m")
    assert plan is not None
    return plan


def refused(**fields: Any) -> str:
    with pytest.raises(InvalidInput) as caught:
        plan_of(**fields)
    return caught.value.message


# -- the request ---------------------------------------------------------------------------------


def test_tools_and_the_default_choice() -> None:
    oa = chat(tools=[WEATHER, NOW])
    assert oa.tools is not None
    assert [t.name for t in oa.tools.specs] == ["get_weather", "now"]
    assert oa.tools.choice.mode is ChoiceMode.AUTO
    assert oa.tools.choice.parallel is True
    assert chat(tools=[NOW], parallel_tool_calls=False).tools.choice.parallel is False  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("fields", "words"),
    [
        ({"tools": [{"type": "function", "function": {"name": "bad name"}}]}, "letters, digits"),
        ({"tools": [{"type": "function", "function": {"name": "x" * 65}}]}, "1 to 64"),
        (
            {"tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": 5}}}]},
            "is not a valid JSON schema",
        ),
        (
            {"tools": [{"type": "function", "function": {"name": "f", "parameters": [1]}}]},
            "must be a JSON schema object",
        ),
        ({"tools": [{"type": "retrieval"}]}, "'type': 'function'"),
        ({"tools": [NOW, NOW]}, "more than once"),
        (
            {"tools": [NOW], "tool_choice": {"type": "function", "function": {"name": "g"}}},
            "not in 'tools'",
        ),
        ({"tool_choice": "required"}, "needs 'tools'"),
        ({"tools": [NOW], "tool_choice": "sometimes"}, "'tool_choice' must be"),
        ({"tools": [NOW], "functions": [{"name": "f"}]}, "may not both be set"),
    ],
)
def test_bad_tools_are_a_400_that_says_why(fields: dict[str, Any], words: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        chat(**fields)
    assert words in caught.value.message


def test_auto_needs_the_models_tool_parser() -> None:
    message = refused(options={}, tools=[NOW])
    assert "model 'm' has no tool parser" in message
    assert "parameters.tool_parser" in message
    assert "unknown" in refused(options={"tool_parser": "unknown"}, tools=[NOW])
    plan_of({}, tools=[NOW], tool_choice="required")  # constrained: no parser needed
    plan_of({}, tools=[NOW], tool_choice="none")


def test_legacy_functions_and_function_call() -> None:
    plan = plan_of(functions=[WEATHER["function"]], function_call={"name": "get_weather"})
    assert plan.choice.mode is ChoiceMode.NAMED
    assert plan.choice.name == "get_weather"


def test_auto_offers_the_tools_and_keeps_the_tool_tokens() -> None:
    oa = chat(tools=[WEATHER])
    plan = _tool_plan(oa, HERMES, "m")
    assert plan is not None
    assert plan.parser is not None
    assert plan.parser.name == "hermes"
    assert oa.chat is not None
    assert oa.chat.tools == (WEATHER,)
    assert oa.generate.sampling.skip_special_tokens is False
    assert oa.generate.sampling.constraint is None


def test_none_does_not_offer_the_tools() -> None:
    oa = chat(tools=[WEATHER], tool_choice="none")
    plan = _tool_plan(oa, {}, "m")
    assert plan is not None
    assert plan.parser is None
    assert oa.chat is not None
    assert oa.chat.tools is None


# -- the constraint ------------------------------------------------------------------------------


def constraint_schema(plan: ToolPlan) -> dict[str, Any]:
    assert plan.constraint is not None
    assert plan.constraint.kind is ConstraintKind.JSON_SCHEMA
    return dict(json.loads(plan.constraint.spec))


def test_required_schema_is_vllms() -> None:
    built = constraint_schema(plan_of(tools=[WEATHER, NOW], tool_choice="required"))
    params = {k: v for k, v in WEATHER["function"]["parameters"].items() if k != "$defs"}
    assert built == {
        "type": "array",
        "minItems": 1,
        "items": {
            "type": "object",
            "anyOf": [
                {
                    "properties": {
                        "name": {"type": "string", "enum": ["get_weather"]},
                        "parameters": params,
                    },
                    "required": ["name", "parameters"],
                },
                {
                    "properties": {
                        "name": {"type": "string", "enum": ["now"]},
                        "parameters": {"type": "object", "properties": {}},
                    },
                    "required": ["name", "parameters"],
                },
            ],
        },
        "$defs": {"unit": {"enum": ["celsius", "fahrenheit"]}},
    }
    jsonschema.Draft202012Validator.check_schema(built)


def test_required_without_parallel_calls_allows_one() -> None:
    plan = plan_of(tools=[NOW], tool_choice="required", parallel_tool_calls=False)
    assert constraint_schema(plan)["maxItems"] == 1


def test_conflicting_defs_are_refused_as_vllm_does() -> None:
    other = json.loads(json.dumps(WEATHER))
    other["function"]["name"] = "other"
    other["function"]["parameters"]["$defs"]["unit"] = {"enum": ["kelvin"]}
    assert "multiple schemas" in refused(tools=[WEATHER, other], tool_choice="required")


def test_named_schema_is_the_functions_parameters() -> None:
    choice = {"type": "function", "function": {"name": "get_weather"}}
    assert (
        constraint_schema(plan_of(tools=[WEATHER], tool_choice=choice))
        == WEATHER["function"]["parameters"]
    )
    choice = {"type": "function", "function": {"name": "now"}}
    assert constraint_schema(plan_of(tools=[NOW], tool_choice=choice)) == {
        "type": "object",
        "properties": {},
    }


@pytest.mark.parametrize(
    "output",
    [
        [{"name": "get_weather", "parameters": {"city": "Paris", "unit": "celsius"}}],
        [
            {"name": "now", "parameters": {}},
            {"name": "get_weather", "parameters": {"city": "Oslo"}},
        ],
    ],
)
def test_an_output_the_required_schema_allows_parses_into_its_calls(output: Any) -> None:
    plan = plan_of(tools=[WEATHER, NOW], tool_choice="required")
    text = json.dumps(output)
    jsonschema.validate(output, constraint_schema(plan))
    body = answer(plan, [text])
    message = body["choices"][0]["message"]
    assert message["content"] is None
    assert [
        (c["function"]["name"], json.loads(c["function"]["arguments"]))
        for c in message["tool_calls"]
    ] == [(item["name"], item["parameters"]) for item in output]
    assert body["choices"][0]["finish_reason"] == "tool_calls"


def test_a_named_functions_output_is_its_arguments() -> None:
    choice = {"type": "function", "function": {"name": "get_weather"}}
    plan = plan_of(tools=[WEATHER], tool_choice=choice)
    body = answer(plan, ['{"city": "Paris"}'])
    call = body["choices"][0]["message"]["tool_calls"][0]
    assert call["function"] == {"name": "get_weather", "arguments": '{"city": "Paris"}'}
    assert call["id"].startswith("chatcmpl-tool-")
    assert body["choices"][0]["finish_reason"] == "stop"  # vLLM's and OpenAI's for a named one


# -- the conversation ----------------------------------------------------------------------------


def test_assistant_calls_and_tool_results_reach_the_template() -> None:
    call = {
        "id": "call_1",
        "type": "function",
        "function": {"name": "now", "arguments": '{"tz": "UTC"}'},
    }
    messages = [
        *MESSAGES,
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "call_1", "content": "12:00"},
    ]
    _, rendered = schema.chat_request({"model": "m", "messages": messages}, 4, 4)
    assert rendered[1] == {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "now", "arguments": {"tz": "UTC"}},
            }
        ],
    }
    assert rendered[2] == {"role": "tool", "content": "12:00", "tool_call_id": "call_1"}


@pytest.mark.parametrize(
    ("message", "words"),
    [
        ({"role": "tool", "content": "x"}, "tool_call_id"),
        (
            {
                "role": "assistant",
                "tool_calls": [{"function": {"name": "f", "arguments": "{oops"}}],
            },
            "is not JSON",
        ),
        ({"role": "assistant", "tool_calls": "f"}, "must be a list"),
    ],
)
def test_bad_tool_messages_are_a_400(message: dict[str, Any], words: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        schema.chat_request({"model": "m", "messages": [*MESSAGES, message]}, 4, 4)
    assert words in caught.value.message


# -- the answer: streamed chunks add up to the non-streamed message ------------------------------


def deltas(index: int, pieces: list[str]) -> list[GenerateDelta]:
    out = [GenerateDelta(index, p, [k]) for k, p in enumerate(pieces)]
    out[-1].finish_reason = FinishReason.EOS
    out[-1].usage = Usage(3, len(pieces))
    return out


def answer(plan: ToolPlan, texts: list[str]) -> dict[str, Any]:
    reply = convert.Reply("chat", "m", "chatcmpl-1", 1)
    done = []
    for i, text in enumerate(texts):
        c = Completion(i)
        for d in deltas(i, [text]):
            c.add(d)
        done.append(c)
    body = convert.chat_completion(reply, done, Usage(3, 1), False)
    if plan.parser is not None:
        tools.answer_choices(body, done, plan)
    return body


def stream(
    plan: ToolPlan, oa: schema.OpenAIRequest, pieces: list[list[str]]
) -> list[dict[str, Any]]:
    """The chunks' choices gathered per index as a client adds them up."""
    framer = ChatFramer(convert.Reply("chat", "m", "chatcmpl-1", 1), oa, plan)
    raw = framer.head()
    for step in zip(*[deltas(i, p) for i, p in enumerate(pieces)], strict=True):
        for d in step:
            raw += framer.chunk(d)
    raw += framer.tail()
    messages: list[dict[str, Any]] = [{"content": "", "tool_calls": []} for _ in pieces]
    for line in raw.decode().split("\n\n"):
        if not line or line == "data: [DONE]":
            continue
        for choice in orjson.loads(line[len("data: ") :])["choices"]:
            m = messages[choice["index"]]
            m["content"] += choice["delta"].get("content") or ""
            for piece in choice["delta"].get("tool_calls", []):
                if piece["index"] == len(m["tool_calls"]):
                    assert piece["id"].startswith("chatcmpl-tool-")
                    assert piece["type"] == "function"
                    m["tool_calls"].append({"name": piece["function"]["name"], "arguments": ""})
                m["tool_calls"][piece["index"]]["arguments"] += piece["function"]["arguments"]
            if choice["finish_reason"]:
                m["finish_reason"] = choice["finish_reason"]
    return messages


TEXTS = [
    'Checking.<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>',
    "No call here.",
]


def test_streamed_tool_calls_add_up_to_the_answer_per_choice() -> None:
    oa = chat(tools=[WEATHER], n=2, stream=True)
    plan = _tool_plan(oa, HERMES, "m")
    assert plan is not None
    pieces = [[t[k : k + 3] for k in range(0, len(t), 3)] for t in TEXTS]
    longest = max(len(p) for p in pieces)
    pieces = [p + [""] * (longest - len(p)) for p in pieces]
    got = stream(plan, oa, pieces)
    body = answer(plan, TEXTS)
    for m, choice in zip(got, body["choices"], strict=True):
        want = choice["message"]
        assert (m["content"] or None) == (want["content"] or None)
        calls = [
            {"name": c["function"]["name"], "arguments": c["function"]["arguments"]}
            for c in want.get("tool_calls", [])
        ]
        assert m["tool_calls"] == calls
        assert m["finish_reason"] == choice["finish_reason"]
    assert body["choices"][0]["message"]["content"] == "Checking."
    assert body["choices"][0]["finish_reason"] == "tool_calls"
    assert body["choices"][1]["message"] == {"role": "assistant", "content": "No call here."}
    assert body["choices"][1]["finish_reason"] == "stop"


def test_the_plan_reads_the_models_options() -> None:
    plan = tool_plan(chat(tools=[NOW]).tools.specs, chat(tools=[NOW]).tools.choice, HERMES, "m")  # type: ignore[union-attr]
    assert plan.offered
    assert plan.ends_with_tool_calls


def test_an_answer_cut_short_ends_with_length_not_tool_calls() -> None:
    plan = plan_of(tools=[NOW], tool_choice="required")
    c = Completion(0)
    cut = GenerateDelta(0, '[{"name": "now", "parameters": {}}, {"name": "now", "par', [1])
    cut.finish_reason, cut.usage = FinishReason.LENGTH, Usage(3, 1)
    c.add(cut)
    body = convert.chat_completion(convert.Reply("chat", "m", "c", 1), [c], Usage(3, 1), False)
    tools.answer_choices(body, [c], plan)
    assert len(body["choices"][0]["message"]["tool_calls"]) == 2
    assert body["choices"][0]["finish_reason"] == "length"
    assert tools.ToolDeltas(plan).feed(cut)[2] is False


def test_legacy_functions_are_answered_with_function_call() -> None:
    oa = chat(functions=[WEATHER["function"]], stream=True)
    plan = _tool_plan(oa, HERMES, "m")
    assert plan is not None
    assert oa.tools is not None
    assert oa.tools.legacy
    text = TEXTS[0] + TEXTS[0][len("Checking.") :]  # two calls: the first is answered
    reply = convert.Reply("chat", "m", "chatcmpl-1", 1)
    c = Completion(0)
    for d in deltas(0, [text]):
        c.add(d)
    body = convert.chat_completion(reply, [c], Usage(3, 1), False)
    tools.answer_choices(body, [c], plan, legacy=True)
    message = body["choices"][0]["message"]
    assert message["function_call"] == {"name": "get_weather", "arguments": '{"city": "Paris"}'}
    assert "tool_calls" not in message
    assert body["choices"][0]["finish_reason"] == "function_call"
    framer = ChatFramer(reply, oa, plan)
    raw = b"".join(
        framer.chunk(d) for d in deltas(0, [text[k : k + 5] for k in range(0, len(text), 5)])
    )
    got = {"name": "", "arguments": ""}
    finish = None
    for line in raw.decode().split("\n\n"):
        if line:
            choice = orjson.loads(line[len("data: ") :])["choices"][0]
            assert "tool_calls" not in choice["delta"]
            for key, value in choice["delta"].get("function_call", {}).items():
                got[key] += value
            finish = choice["finish_reason"] or finish
    assert got == message["function_call"]
    assert finish == "function_call"
