"""Ollama's API with the ``ollama`` Python client, unchanged: generate and chat streamed and not
(the stream's text is the answer's, greedy text is OpenAI chat's), ``format``, tools on the
tools model (the call OpenAI chat answers), embeddings equal to /v1/embeddings', the model
routes, the errors, API keys and the metrics' protocol label."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from typing import Any

import httpx
import jsonschema
import numpy as np
import ollama
import openai
import pytest

from tests.conftest import EXAMPLES
from tests.integration.tools_support import WEATHER, tools_model
from tests.serverproc import ServerProcess, served, start_server

LLM, TOOLS, EMBEDDER = "tiny_llama", "tiny_llama_tools", "tiny_embedder"
KEY = "sk-ollama-test"
STORY = [{"role": "user", "content": "Tell me a story."}]
GREEDY = {"temperature": 0, "num_predict": 24}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    repo = tmp_path_factory.mktemp("ollama_repo")
    shutil.copytree(tools_model(), repo / TOOLS)
    for name in (LLM, EMBEDDER):
        shutil.copytree(EXAMPLES / name, repo / name)
    yield from served(start_server(repo, "--api-key", KEY))


@pytest.fixture(scope="module")
def client(server: ServerProcess) -> ollama.Client:
    return ollama.Client(host=server.http_url, headers={"Authorization": f"Bearer {KEY}"})


@pytest.fixture(scope="module")
def oai(server: ServerProcess) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.http_url + "/v1", api_key=KEY, max_retries=0)


def openai_text(oai: openai.OpenAI, model: str, messages: list[dict[str, Any]]) -> str:
    answer = oai.chat.completions.create(
        model=model,
        messages=messages,
        temperature=0,
        max_tokens=24,  # type: ignore[arg-type]
    )
    return answer.choices[0].message.content or ""


def test_chat_greedy_text_is_openai_chats_streamed_or_not(
    client: ollama.Client, oai: openai.OpenAI
) -> None:
    whole = client.chat(model=LLM, messages=STORY, options=GREEDY)
    parts = list(client.chat(model=f"{LLM}:latest", messages=STORY, options=GREEDY, stream=True))
    assert whole.message.content
    assert whole.message.content == openai_text(oai, LLM, STORY)
    assert "".join(p.message.content or "" for p in parts) == whole.message.content
    assert [p.done for p in parts] == [False] * (len(parts) - 1) + [True]
    for answer in (whole, parts[-1]):
        assert answer.done_reason in ("stop", "length")
        assert answer.eval_count is not None
        assert 0 < answer.eval_count <= 24
        assert answer.prompt_eval_count
        assert answer.prompt_eval_count > 0
        assert answer.total_duration is not None
        assert answer.eval_duration is not None


def test_generate_is_the_chat_of_system_and_prompt(
    client: ollama.Client, oai: openai.OpenAI
) -> None:
    whole = client.generate(
        model=LLM, prompt="Tell me a story.", system="Be terse.", options=GREEDY
    )
    parts = list(
        client.generate(
            model=LLM, prompt="Tell me a story.", system="Be terse.", options=GREEDY, stream=True
        )
    )
    messages = [{"role": "system", "content": "Be terse."}, *STORY]
    assert whole.response
    assert whole.response == openai_text(oai, LLM, messages)
    assert "".join(p.response or "" for p in parts) == whole.response
    assert parts[-1].done
    assert parts[-1].eval_count == whole.eval_count
    raw = client.generate(model=LLM, prompt="Once upon a time", raw=True, options=GREEDY)
    completion = oai.completions.create(
        model=LLM, prompt="Once upon a time", temperature=0, max_tokens=24
    )
    assert raw.response == completion.choices[0].text


def test_an_empty_prompt_loads_the_model(client: ollama.Client) -> None:
    loaded = client.generate(model=LLM, prompt="")
    assert (loaded.done, loaded.done_reason, loaded.response) == (True, "load", "")
    assert client.chat(model=LLM, messages=[]).done_reason == "load"


def test_format_json_schema_is_obeyed(client: ollama.Client) -> None:
    shape = {
        "type": "object",
        "properties": {"ok": {"type": "boolean"}},
        "required": ["ok"],
        "additionalProperties": False,
    }
    answer = client.chat(
        model=LLM, messages=STORY, format=shape, options={"temperature": 0, "num_predict": 40}
    )
    assert answer.done_reason == "stop", answer.message.content
    jsonschema.validate(json.loads(answer.message.content or ""), shape)
    loose = client.generate(
        model=LLM, prompt="JSON please", format="json", options={"temperature": 0}, stream=False
    )
    assert loose.response is not None
    assert loose.response.startswith("{")


def test_tools_give_openai_chats_call_streamed_or_not(
    client: ollama.Client, oai: openai.OpenAI
) -> None:
    question = [{"role": "user", "content": "What is the weather in Oslo?"}]
    options = {"temperature": 0, "num_predict": 80}
    whole = client.chat(model=TOOLS, messages=question, tools=[WEATHER], options=options)
    parts = list(
        client.chat(model=TOOLS, messages=question, tools=[WEATHER], options=options, stream=True)
    )
    want = (
        oai.chat.completions.create(
            model=TOOLS,
            messages=question,
            tools=[WEATHER],
            temperature=0,
            max_tokens=80,  # type: ignore[arg-type,list-item]
        )
        .choices[0]
        .message
    )
    assert want.tool_calls
    expected = [(c.function.name, json.loads(c.function.arguments)) for c in want.tool_calls]
    got = [(c.function.name, dict(c.function.arguments)) for c in whole.message.tool_calls or []]
    assert got == expected
    streamed = [c for p in parts for c in p.message.tool_calls or []]
    assert [(c.function.name, dict(c.function.arguments)) for c in streamed] == expected


def test_a_tool_result_is_rendered_as_openai_chat_renders_it(
    client: ollama.Client, oai: openai.OpenAI
) -> None:
    call = {"function": {"name": "get_weather", "arguments": {"city": "Oslo"}}}
    conversation = [
        {"role": "user", "content": "What is the weather in Oslo?"},
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "tool_name": "get_weather", "content": "sunny"},
    ]
    answer = client.chat(model=TOOLS, messages=conversation, tools=[WEATHER], options=GREEDY)
    openai_call = {"id": "call_1_0", "type": "function",
                   "function": {"name": "get_weather", "arguments": '{"city":"Oslo"}'}}  # fmt: skip
    same = [
        conversation[0],
        {"role": "assistant", "content": "", "tool_calls": [openai_call]},
        {"role": "tool", "tool_call_id": "call_1_0", "name": "get_weather", "content": "sunny"},
    ]
    want = (
        oai.chat.completions.create(
            model=TOOLS,
            messages=same,
            tools=[WEATHER],
            temperature=0,
            max_tokens=24,  # type: ignore[arg-type,list-item]
        )
        .choices[0]
        .message
    )
    calls = [(c.function.name, json.loads(c.function.arguments)) for c in want.tool_calls or []]
    got = [(c.function.name, dict(c.function.arguments)) for c in answer.message.tool_calls or []]
    assert (answer.message.content, got) == (want.content or "", calls)
    assert answer.message.content or got  # the model answered something to compare


def test_embeddings_are_v1_embeddings_vectors(client: ollama.Client, oai: openai.OpenAI) -> None:
    texts = ["hello world", "Rivers run to the sea."]
    want = [d.embedding for d in oai.embeddings.create(model=EMBEDDER, input=texts).data]
    got = client.embed(model=f"{EMBEDDER}:latest", input=texts)
    assert got.model == f"{EMBEDDER}:latest"
    assert got.prompt_eval_count
    np.testing.assert_allclose(np.array(got.embeddings), np.array(want), rtol=0, atol=1e-6)
    one = client.embed(model=EMBEDDER, input=texts[0], truncate=True).embeddings
    np.testing.assert_allclose(np.array(one), np.array(want[:1]), rtol=0, atol=1e-6)
    old = client.embeddings(model=EMBEDDER, prompt=texts[1]).embedding
    np.testing.assert_allclose(np.array(old), np.array(want[1]), rtol=0, atol=1e-6)


def test_the_model_routes(client: ollama.Client) -> None:
    listed = {m.model for m in client.list().models}
    assert listed == {f"{LLM}:latest", f"{TOOLS}:latest", f"{EMBEDDER}:latest"}
    assert {m.model for m in client.ps().models} == listed
    assert all(m.size for m in client.ps().models)  # the memory each holds, measured
    shown = client.show(TOOLS)
    assert shown.capabilities is not None
    assert "tools" in shown.capabilities
    assert client.show(f"{EMBEDDER}:latest").capabilities == ["embedding"]
    assert client.show(f"{LLM}:1").modelinfo is not None


def test_ollamas_errors(client: ollama.Client, server: ServerProcess) -> None:
    with pytest.raises(ollama.ResponseError) as missing:
        client.chat(model="nope", messages=STORY)
    assert missing.value.status_code == 404
    assert missing.value.error == 'model "nope" not found, try pulling it first'
    for call in (lambda: client.embed(model="nope", input="x"), lambda: client.show("nope")):
        with pytest.raises(ollama.ResponseError) as also:
            call()
        assert also.value.status_code == 404
    with pytest.raises(ollama.ResponseError) as images:
        client.generate(model=LLM, prompt="x", images=[b"\x89PNG"])
    assert images.value.status_code == 400
    for call in (lambda: client.pull("x"), lambda: client.delete("x")):
        with pytest.raises(ollama.ResponseError) as pulled:
            call()
        assert pulled.value.status_code == 501
    answer = httpx.get(server.http_url + "/api/tags")
    assert answer.status_code == 401
    assert "error" in answer.json()


def test_the_version_and_the_metrics_label(client: ollama.Client, server: ServerProcess) -> None:
    headers = {"Authorization": f"Bearer {KEY}"}
    version = httpx.get(server.http_url + "/api/version", headers=headers).json()
    assert isinstance(version["version"], str)
    client.generate(model=LLM, prompt="hi", options={"num_predict": 2})
    metrics = httpx.get(server.http_url + "/metrics", headers=headers).text
    assert 'protocol="ollama"' in metrics
