"""openai-agents runs a tool loop against the server (OpenAIChatCompletionsModel on
/v1/chat/completions) with the tools model: the model calls get_weather, the SDK runs the
tool and sends its result back, the model answers in words."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from openai import AsyncOpenAI

from tests.integration.tools_support import MODEL, tools_server
from tests.serverproc import ServerProcess

__all__ = ["tools_server"]  # the fixture


async def run_agent(
    base_url: str, question: str, stream: bool, responses: bool = False
) -> tuple[str, list[str]]:
    """``responses``: the SDK's default model, OpenAIResponsesModel (/v1/responses)."""
    from agents import (
        Agent,
        ModelSettings,
        OpenAIChatCompletionsModel,
        OpenAIResponsesModel,
        Runner,
        function_tool,
        set_tracing_disabled,
    )

    set_tracing_disabled(True)
    asked: list[str] = []

    @function_tool
    def get_weather(city: str) -> str:
        """Get the weather for a city."""
        asked.append(city)
        return '{"sky": "sunny"}'

    client = AsyncOpenAI(base_url=base_url, api_key="unused", max_retries=0)
    agent: Any = Agent(
        name="weather",
        instructions="You answer questions about the weather.",
        tools=[get_weather],
        model=(OpenAIResponsesModel if responses else OpenAIChatCompletionsModel)(
            model=MODEL, openai_client=client
        ),
        model_settings=ModelSettings(temperature=0, max_tokens=80),
    )
    if stream:
        run = Runner.run_streamed(agent, question, max_turns=4)
        async for _ in run.stream_events():
            pass
        return str(run.final_output), asked
    result = await Runner.run(agent, question, max_turns=4)
    return str(result.final_output), asked


@pytest.mark.parametrize("stream", [False, True])
def test_an_agent_runs_its_tool_loop(tools_server: ServerProcess, stream: bool) -> None:
    answer, asked = asyncio.run(
        run_agent(tools_server.http_url + "/v1", "What is the weather in Oslo?", stream)
    )
    assert asked == ["Paris"]  # the call the model was taught, run by the SDK
    assert answer == "It is sunny."  # the model's answer to the tool's result
