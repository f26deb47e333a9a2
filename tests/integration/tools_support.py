"""The tiny Llama with hermes tool calls (examples/build_llm.py --tools), served: built into
build/ when missing (make builds it; a clean clone's first run builds it here)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

from tests.conftest import EXAMPLES, ROOT, load_module
from tests.serverproc import ServerProcess, served, start_server

MODEL = "tiny_llama_tools"
WEATHER: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
}


def tools_model() -> Path:
    builder = load_module("build_llm", ROOT / "examples" / "build_llm.py")
    return Path(builder.build_tools())


@pytest.fixture(scope="module")
def tools_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """The tools model, and the plain tiny Llama (which has no tool parser)."""
    repo = tmp_path_factory.mktemp("tools_repo")
    shutil.copytree(tools_model(), repo / MODEL)
    shutil.copytree(EXAMPLES / "tiny_llama", repo / "tiny_llama")
    yield from served(start_server(repo))


@pytest.fixture(scope="module")
def oai(tools_server: ServerProcess) -> openai.OpenAI:
    return openai.OpenAI(base_url=tools_server.http_url + "/v1", api_key="unused", max_retries=0)
