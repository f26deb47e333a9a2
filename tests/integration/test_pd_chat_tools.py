"""Chat tools through a scheduler, a prefill and a decode instance (real processes): the same
calls as a mixed instance, streamed and not, and openai-agents' tool loop through the
scheduler."""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

from tests.integration.test_chat_tools_agents import run_agent
from tests.integration.tools_support import MODEL, WEATHER, tools_model
from tests.pdproc import start_instance, start_scheduler
from tests.serverproc import ServerProcess, served, start_server, stop_cleanly

MESSAGES: list[dict[str, Any]] = [{"role": "user", "content": "Is it raining in Rome?"}]
RESULT: list[dict[str, Any]] = [
    *MESSAGES,
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "get_weather", "arguments": '{"city": "Rome"}'},
            }
        ],
    },
    {"role": "tool", "tool_call_id": "call_1", "content": "rain"},
]


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    dest = tmp_path_factory.mktemp("pd_tools_repo")
    shutil.copytree(tools_model(), dest / MODEL)
    return dest


@pytest.fixture(scope="module")
def mixed(repo: Path) -> Iterator[ServerProcess]:
    yield from served(start_server(repo))


@pytest.fixture(scope="module")
def scheduler(repo: Path) -> Iterator[ServerProcess]:
    p = start_instance(repo, "prefill")
    d = start_instance(repo, "decode")
    s = start_scheduler([p], [d], "--policy", "round-robin")
    yield s
    for proc in (s, p, d):
        stop_cleanly(proc)


def answer(server: ServerProcess, messages: list[dict[str, Any]], stream: bool) -> Any:
    """(content, [(name, arguments)], finish_reason) of the first choice, added up if streamed."""
    client = openai.OpenAI(base_url=server.http_url + "/v1", api_key="unused", max_retries=0)
    fields: dict[str, Any] = {"model": MODEL, "messages": messages, "tools": [WEATHER]}
    fields |= {"temperature": 0, "max_tokens": 80}
    if not stream:
        choice = client.chat.completions.create(**fields).choices[0]
        calls = [(c.function.name, c.function.arguments) for c in choice.message.tool_calls or []]
        return choice.message.content, calls, choice.finish_reason
    content, pieces, finish = "", [], None
    for chunk in client.chat.completions.create(**fields, stream=True):
        for choice in chunk.choices:
            content += choice.delta.content or ""
            for piece in choice.delta.tool_calls or []:
                if piece.index == len(pieces):
                    pieces.append([piece.function.name, ""])
                pieces[piece.index][1] += piece.function.arguments or ""
            finish = choice.finish_reason or finish
    return content or None, [tuple(p) for p in pieces], finish


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("messages", [MESSAGES, RESULT], ids=["call", "result"])
def test_pd_answers_the_mixed_instances_calls(
    mixed: ServerProcess, scheduler: ServerProcess, messages: list[dict[str, Any]], stream: bool
) -> None:
    expected = answer(mixed, messages, stream=False)
    assert expected[1] or expected[0]  # a call, or the answer to the tool's result
    assert answer(scheduler, messages, stream) == expected


def test_an_agent_loop_through_the_scheduler(scheduler: ServerProcess) -> None:
    final, asked = asyncio.run(run_agent(scheduler.http_url + "/v1", "Weather in Lima?", True))
    assert asked == ["Paris"]
    assert final == "It is sunny."
