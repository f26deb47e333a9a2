"""Tools on /v1/chat/completions with the openai SDK, on the tiny Llama taught hermes tool calls
(tools_support.py): whatever greedy decoding emits, the chat answer's calls are the hermes
parse of the same text got raw from /v1/completions, streamed equals non-streamed, tool results
are taken back and rendered by the template, and what cannot be served is a 400."""

from __future__ import annotations

import json
from typing import Any

import httpx
import openai
import pytest
from transformers import AutoTokenizer

from rosettaserve.protocols.tools import PARSERS, extract
from tests.integration.tools_support import MODEL, WEATHER, oai, tools_model, tools_server
from tests.serverproc import ServerProcess

__all__ = ["oai", "tools_server"]  # the fixtures
MESSAGES: list[dict[str, Any]] = [{"role": "user", "content": "What is the weather in Oslo?"}]


def rendered(messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> str:
    """The prompt as the model's own template renders it, apart from the server."""
    tokenizer = AutoTokenizer.from_pretrained(tools_model())
    return str(
        tokenizer.apply_chat_template(
            messages, tools=tools, tokenize=False, add_generation_prompt=True
        )
    )


def raw_text(server: ServerProcess, prompt: str, max_tokens: int) -> str:
    """The greedy text of ``prompt`` with the tool tokens kept, from /v1/completions."""
    doc = {
        "model": MODEL,
        "prompt": prompt,
        "max_tokens": max_tokens,
        "temperature": 0,
        "skip_special_tokens": False,
        "add_special_tokens": False,
    }
    answer = httpx.post(server.http_url + "/v1/completions", json=doc, timeout=60).json()
    return str(answer["choices"][0]["text"])


def calls(message: Any) -> list[tuple[str, str]]:
    return [(c.function.name, c.function.arguments) for c in message.tool_calls or []]


def test_auto_answers_the_hermes_parse_of_the_models_text(
    oai: openai.OpenAI, tools_server: ServerProcess
) -> None:
    answer = oai.chat.completions.create(
        model=MODEL,
        messages=MESSAGES,
        tools=[WEATHER],
        temperature=0,
        max_tokens=80,
    )
    choice = answer.choices[0]
    text = raw_text(tools_server, rendered(MESSAGES, [WEATHER]), 80)
    want = extract(PARSERS["hermes"], text)
    assert want.calls, text  # the model was taught to call; the test reads what it emitted
    assert calls(choice.message) == [(c.name, c.arguments) for c in want.calls]
    assert choice.message.content == want.content
    assert choice.finish_reason == "tool_calls"
    call = choice.message.tool_calls[0]
    assert call.type == "function"
    assert call.id.startswith("chatcmpl-tool-")
    assert json.loads(call.function.arguments) == {"city": "Paris"}


def test_streamed_tool_calls_equal_the_non_streamed_ones(oai: openai.OpenAI) -> None:
    fields: dict[str, Any] = {"model": MODEL, "messages": MESSAGES, "tools": [WEATHER]}
    fields |= {"temperature": 0, "max_tokens": 80, "n": 2}
    whole = oai.chat.completions.create(**fields)
    got: dict[int, dict[str, Any]] = {}
    for chunk in oai.chat.completions.create(**fields, stream=True):
        for choice in chunk.choices:
            m = got.setdefault(choice.index, {"content": "", "calls": [], "finish": None})
            m["content"] += choice.delta.content or ""
            for piece in choice.delta.tool_calls or []:
                if piece.index == len(m["calls"]):  # a call's first delta: id, type, name
                    assert piece.id
                    assert piece.type == "function"
                    assert piece.function
                    assert piece.function.name
                    m["calls"].append([piece.function.name, ""])
                m["calls"][piece.index][1] += piece.function.arguments or ""
            m["finish"] = choice.finish_reason or m["finish"]
    assert sorted(got) == [0, 1]
    for choice in whole.choices:
        m = got[choice.index]
        assert [tuple(c) for c in m["calls"]] == calls(choice.message)
        assert (m["content"] or None) == choice.message.content
        assert m["finish"] == choice.finish_reason == "tool_calls"


def test_a_tool_result_is_rendered_and_answered(
    oai: openai.OpenAI, tools_server: ServerProcess
) -> None:
    call = {
        "id": "call_7f3a",
        "type": "function",
        "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
    }
    messages: list[dict[str, Any]] = [
        *MESSAGES,
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "call_7f3a", "content": '{"sky": "clear"}'},
    ]
    answer = oai.chat.completions.create(
        model=MODEL,
        messages=messages,
        tools=[WEATHER],
        temperature=0,
        max_tokens=20,
    )
    # the template's arguments are objects (as vLLM hands them), the result carries its id
    local = [
        *messages[:1],
        {
            **messages[1],
            "tool_calls": [
                {**call, "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}
            ],
        },
        messages[2],
    ]
    prompt = rendered(local, [WEATHER])
    assert 'call_7f3a: {"sky": "clear"}' in prompt
    tokenizer = AutoTokenizer.from_pretrained(tools_model())
    assert answer.usage is not None
    assert answer.usage.prompt_tokens == len(
        tokenizer(prompt, add_special_tokens=False)["input_ids"]
    )
    text = raw_text(tools_server, prompt, 20)
    assert answer.choices[0].message.content == text  # the same prompt: the same greedy text
    assert answer.choices[0].message.tool_calls is None
    assert answer.choices[0].finish_reason == "stop"


def test_tool_choice_none_offers_no_tools(oai: openai.OpenAI, tools_server: ServerProcess) -> None:
    answer = oai.chat.completions.create(
        model=MODEL,
        messages=MESSAGES,
        tools=[WEATHER],
        tool_choice="none",
        temperature=0,
        max_tokens=30,
    )
    text = raw_text(tools_server, rendered(MESSAGES, None), 30)
    assert answer.choices[0].message.content == text.replace("<tool_call>", "").replace(
        "</tool_call>", ""
    )
    assert answer.choices[0].message.tool_calls is None


@pytest.mark.parametrize(
    ("fields", "words"),
    [
        ({"model": "tiny_llama", "tools": [WEATHER]}, "model 'tiny_llama' has no tool parser"),
        ({"tool_choice": {"type": "function", "function": {"name": "nope"}}}, "not in 'tools'"),
        (
            {
                "tools": [
                    {**WEATHER, "function": {**WEATHER["function"], "parameters": {"type": "x"}}}
                ]
            },
            "is not a valid JSON schema",
        ),
        ({"tools": [{"type": "function", "function": {"name": "a b"}}]}, "letters, digits"),
    ],
)
def test_what_cannot_be_served_is_a_400(
    oai: openai.OpenAI, fields: dict[str, Any], words: str
) -> None:
    request: dict[str, Any] = {"model": MODEL, "messages": MESSAGES, "tools": [WEATHER], **fields}
    with pytest.raises(openai.BadRequestError) as caught:
        oai.chat.completions.create(**request)
    assert caught.value.status_code == 400
    assert words in str(caught.value)


def test_legacy_functions_get_a_function_call(oai: openai.OpenAI) -> None:
    answer = oai.chat.completions.create(
        model=MODEL,
        messages=MESSAGES,
        functions=[WEATHER["function"]],
        temperature=0,
        max_tokens=80,
    )
    choice = answer.choices[0]
    assert choice.message.function_call is not None
    assert choice.message.function_call.name == "get_weather"
    assert json.loads(choice.message.function_call.arguments) == {"city": "Paris"}
    assert choice.message.tool_calls is None
    assert choice.finish_reason == "function_call"
