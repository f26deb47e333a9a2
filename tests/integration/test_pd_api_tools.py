"""Tools over the Responses and Messages APIs through a scheduler, a prefill and a decode
instance (real processes): the same items and blocks as a mixed instance, streamed and not,
for a call and for the answer to its result, and openai-agents' Responses tool loop."""

from __future__ import annotations

import asyncio
from typing import Any

import anthropic
import openai
import pytest

from tests.integration.test_api_tools import (
    MESSAGES_TOOL,
    QUESTION,
    RESPONSES_TOOL,
    item_fields,
    message_fields,
)
from tests.integration.test_chat_tools_agents import run_agent
from tests.integration.test_pd_chat_tools import mixed, repo, scheduler
from tests.integration.tools_support import MODEL
from tests.serverproc import ServerProcess

__all__ = ["mixed", "repo", "scheduler"]  # the fixtures

CALL: dict[str, Any] = {
    "type": "function_call",
    "call_id": "call_1",
    "name": "get_weather",
    "arguments": '{"city": "Rome"}',
}
RESPONSES_TURNS: dict[str, list[Any]] = {
    "call": [{"role": "user", "content": QUESTION}],
    "result": [
        {"role": "user", "content": QUESTION},
        CALL,
        {"type": "function_call_output", "call_id": "call_1", "output": "rain"},
    ],
}
MESSAGES_TURNS: dict[str, list[Any]] = {
    "call": [{"role": "user", "content": QUESTION}],
    "result": [
        {"role": "user", "content": QUESTION},
        {"role": "assistant", "content": [
            {"type": "tool_use", "id": "toolu_1", "name": "get_weather",
             "input": {"city": "Rome"}}]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_1", "content": "rain"}]},
    ],
}  # fmt: skip


def responses_items(server: ServerProcess, turn: str, stream: bool) -> Any:
    client = openai.OpenAI(base_url=server.http_url + "/v1", api_key="unused", max_retries=0)
    fields: dict[str, Any] = {"model": MODEL, "input": RESPONSES_TURNS[turn]}
    fields |= {"tools": [RESPONSES_TOOL], "max_output_tokens": 80, "temperature": 0}
    if not stream:
        return item_fields(client.responses.create(**fields).output)
    with client.responses.stream(**fields) as events:
        return item_fields(events.get_final_response().output)


def messages_content(server: ServerProcess, turn: str, stream: bool) -> Any:
    client = anthropic.Anthropic(base_url=server.http_url, api_key="unused", max_retries=0)
    fields: dict[str, Any] = {"model": MODEL, "messages": MESSAGES_TURNS[turn]}
    fields |= {"tools": [MESSAGES_TOOL], "max_tokens": 80, "extra_body": {"temperature": 0}}
    if not stream:
        return message_fields(client.messages.create(**fields))
    with client.messages.stream(**fields) as events:
        return message_fields(events.get_final_message())


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("turn", ["call", "result"])
def test_pd_responses_items_are_the_mixed_instances(
    mixed: ServerProcess, scheduler: ServerProcess, turn: str, stream: bool
) -> None:
    expected = responses_items(mixed, turn, stream=False)
    assert [kind for kind, *_ in expected] == ["function_call" if turn == "call" else "message"]
    assert responses_items(scheduler, turn, stream) == expected


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("turn", ["call", "result"])
def test_pd_messages_blocks_are_the_mixed_instances(
    mixed: ServerProcess, scheduler: ServerProcess, turn: str, stream: bool
) -> None:
    expected = messages_content(mixed, turn, stream=False)
    assert expected["stop_reason"] == ("tool_use" if turn == "call" else "end_turn")
    assert messages_content(scheduler, turn, stream) == expected


def test_a_responses_agent_loop_through_the_scheduler(scheduler: ServerProcess) -> None:
    url = scheduler.http_url + "/v1"
    final, asked = asyncio.run(run_agent(url, "Weather in Lima?", True, responses=True))
    assert asked == ["Paris"]
    assert final == "It is sunny."
