"""Chat tools on ``runtime: vllm`` against vLLM's own server (``--enable-auto-tool-choice
--tool-call-parser hermes``) on the same tools model (build_model.py --tools): the same calls
and content for the same request, streamed and not, and the same answer to a tool's result."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import openai
import pytest

from tests import serverproc
from tests.serverproc import served, start_server
from tests_vllm.build_model import build_tools
from tests_vllm.conftest import (
    KV_CACHE_BYTES,
    MODEL,
    START_TIMEOUT_S,
    model_folder,
    vllm_server,
)

MODEL_YAML = f"""\
runtime: vllm
parameters:
  max_num_seqs: 8
  kv_cache_memory_bytes: {KV_CACHE_BYTES}
  tool_parser: hermes
"""
WEATHER: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}
ASK: list[dict[str, Any]] = [{"role": "user", "content": "What is the weather in Oslo?"}]
RESULT: list[dict[str, Any]] = [
    *ASK,
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
            }
        ],
    },
    {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
]


@pytest.fixture(scope="module")
def clients(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, openai.OpenAI]]:
    """rosettaserve (runtime: vllm) and vLLM's own server on the tools model."""
    source = build_tools()
    repo = tmp_path_factory.mktemp("vllm_tools_repo")
    model_folder(repo, MODEL, MODEL_YAML, source)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(serverproc, "START_TIMEOUT_S", START_TIMEOUT_S)
        server = start_server(repo)
    flags = ("--enable-auto-tool-choice", "--tool-call-parser", "hermes")
    theirs = vllm_server(source, tmp_path_factory.mktemp("vllm_tools_server"), *flags)
    for ours in served(server):
        for url in theirs:
            yield {
                name: openai.OpenAI(base_url=base + "/v1", api_key="unused", max_retries=0)
                for name, base in (("ours", ours.http_url), ("vllm", url))
            }


def answer(client: openai.OpenAI, messages: list[dict[str, Any]], stream: bool) -> Any:
    fields: dict[str, Any] = {"model": MODEL, "messages": messages, "tools": [WEATHER]}
    fields |= {"temperature": 0, "max_tokens": 80}
    if not stream:
        choice = client.chat.completions.create(**fields).choices[0]
        calls = [(c.function.name, c.function.arguments) for c in choice.message.tool_calls or []]
        return choice.message.content or None, calls, choice.finish_reason
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


@pytest.mark.parametrize("messages", [ASK, RESULT], ids=["call", "result"])
def test_the_same_calls_as_vllms_own_server(
    clients: dict[str, openai.OpenAI], messages: list[dict[str, Any]]
) -> None:
    theirs = answer(clients["vllm"], messages, stream=False)
    assert theirs[1] or theirs[0]  # a call, or the answer to the tool's result
    assert answer(clients["ours"], messages, stream=False) == theirs
    assert answer(clients["ours"], messages, stream=True) == theirs
