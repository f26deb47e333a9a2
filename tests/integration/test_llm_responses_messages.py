"""The Responses and Messages APIs on a real server with the official `openai` and `anthropic`
clients: the greedy text equals the chat completion of the same messages, streamed and not;
stored responses (retrieve, delete, previous_response_id, the bound of --responses-store);
count_tokens; every error in its API's shape, the missing API key's included; the families
counted in the metrics under their own names."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import openai
import pytest

from tests.pdproc import llm_repo
from tests.serverproc import ServerProcess, served, start_server

KEY = "apis-key-1a2b"
MODEL = "tiny_llama"
STORE = 3  # --responses-store
GREEDY = {"temperature": 0}
CONVERSATIONS: list[list[dict[str, str]]] = [
    [{"role": "user", "content": "Tell me a story."}],
    [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Say hello."}],
    [
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello! How can I help?"},
        {"role": "user", "content": "Tell me a story."},
    ],
]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    repo = llm_repo(tmp_path_factory.mktemp("apis_repo"))
    args = ("--api-key", KEY, "--responses-store", str(STORE))
    yield from served(start_server(repo, *args))


@pytest.fixture(scope="module")
def oai(server: ServerProcess) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.http_url + "/v1", api_key=KEY, max_retries=0)


@pytest.fixture(scope="module")
def claude(server: ServerProcess) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=server.http_url, api_key=KEY, max_retries=0)


def chat_text(oai: openai.OpenAI, messages: list[dict[str, str]], max_tokens: int = 40) -> str:
    done = oai.chat.completions.create(
        model=MODEL,
        messages=messages,  # type: ignore[arg-type]
        max_tokens=max_tokens,
        temperature=0,
    )
    return done.choices[0].message.content or ""


def responses_input(messages: list[dict[str, str]]) -> tuple[str | None, list[Any]]:
    """The instructions and input items of a chat conversation."""
    system = [m["content"] for m in messages if m["role"] == "system"]
    items: list[Any] = []
    for m in messages:
        if m["role"] == "assistant":
            items.append({"type": "message", "role": "assistant",
                          "content": [{"type": "output_text", "text": m["content"]}]})  # fmt: skip
        elif m["role"] == "user":
            items.append(
                {"role": "user", "content": [{"type": "input_text", "text": m["content"]}]}
            )
    return (system[0] if system else None), items


def anthropic_args(messages: list[dict[str, str]]) -> dict[str, Any]:
    system = [m["content"] for m in messages if m["role"] == "system"]
    turns = [m for m in messages if m["role"] != "system"]
    return {"messages": turns, **({"system": system[0]} if system else {})}


# -- the same greedy text as the chat completion ------------------------------------------------


@pytest.mark.parametrize("conversation", CONVERSATIONS)
def test_responses_text_equals_the_chat_completion(
    oai: openai.OpenAI, conversation: list[dict[str, str]]
) -> None:
    expected = chat_text(oai, conversation)
    assert expected
    instructions, items = responses_input(conversation)
    kw: dict[str, Any] = {"model": MODEL, "max_output_tokens": 40, "temperature": 0}
    if instructions:
        kw["instructions"] = instructions
    done = oai.responses.create(input=items, **kw)
    assert done.output_text == expected
    assert done.status == "completed"
    assert done.object == "response"
    assert done.id.startswith("resp_")
    assert done.output[0].id.startswith("msg_")
    with oai.responses.stream(input=items, **kw) as stream:
        deltas = [e.delta for e in stream if e.type == "response.output_text.delta"]
        final = stream.get_final_response()
    assert "".join(deltas) == final.output_text == expected
    assert final.usage == done.usage


@pytest.mark.parametrize("conversation", CONVERSATIONS)
def test_messages_text_equals_the_chat_completion(
    oai: openai.OpenAI, claude: anthropic.Anthropic, conversation: list[dict[str, str]]
) -> None:
    expected = chat_text(oai, conversation)
    # (the anthropic SDK of 2026 has no sampling arguments: sent as extra body fields)
    greedy = {"extra_body": {"temperature": 0}}
    args = {**anthropic_args(conversation), "model": MODEL, "max_tokens": 40, **greedy}
    done = claude.messages.create(**args)
    assert [b.type for b in done.content] == ["text"]
    assert done.content[0].text == expected  # type: ignore[union-attr]
    assert (done.type, done.role, done.stop_reason) == ("message", "assistant", "end_turn")
    assert done.id.startswith("msg_")
    with claude.messages.stream(**args) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text == expected
    assert [(b.type, b.text) for b in final.content] == [("text", expected)]  # type: ignore[union-attr]
    assert final.usage.output_tokens == done.usage.output_tokens
    counted = claude.messages.count_tokens(model=MODEL, **anthropic_args(conversation))
    assert counted.input_tokens == done.usage.input_tokens > 0


# -- the Responses API ---------------------------------------------------------------------------


def test_responses_raw_stream_with_stream_true(oai: openai.OpenAI) -> None:
    events = list(
        oai.responses.create(
            model=MODEL, input="Say hello.", temperature=0, max_output_tokens=40, stream=True
        )
    )
    kinds = [e.type for e in events]
    assert kinds[:4] == [
        "response.created", "response.in_progress", "response.output_item.added",
        "response.content_part.added",
    ]  # fmt: skip
    assert kinds[-5:] == [
        "response.output_text.delta", "response.output_text.done", "response.content_part.done",
        "response.output_item.done", "response.completed",
    ]  # fmt: skip
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert events[-1].response.output_text == chat_text(  # type: ignore[union-attr]
        oai, [{"role": "user", "content": "Say hello."}]
    )


def test_responses_cut_by_max_output_tokens_is_incomplete(oai: openai.OpenAI) -> None:
    done = oai.responses.create(model=MODEL, input="Tell me a story.", max_output_tokens=3)
    assert done.status == "incomplete"
    assert done.incomplete_details is not None
    assert done.incomplete_details.reason == "max_output_tokens"
    assert done.usage is not None
    assert done.usage.output_tokens == 3
    assert done.usage.total_tokens == done.usage.input_tokens + 3


def test_stored_responses(oai: openai.OpenAI) -> None:
    first = oai.responses.create(
        model=MODEL, input="Hi", temperature=0, max_output_tokens=20, metadata={"run": "1"}
    )
    kept = oai.responses.retrieve(first.id)
    assert kept.model_dump() == first.model_dump()
    assert kept.metadata == {"run": "1"}
    assert kept.store is True
    second = oai.responses.create(
        model=MODEL,
        input="Tell me a story.",
        previous_response_id=first.id,
        instructions="You are terse.",
        temperature=0,
        max_output_tokens=40,
    )
    assert second.previous_response_id == first.id
    conversation = [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": first.output_text},
        {"role": "user", "content": "Tell me a story."},
    ]
    assert second.output_text == chat_text(oai, conversation)
    oai.responses.delete(first.id)
    with pytest.raises(openai.NotFoundError):
        oai.responses.retrieve(first.id)
    with pytest.raises(openai.NotFoundError):
        oai.responses.delete(first.id)
    with pytest.raises(openai.NotFoundError):
        oai.responses.create(model=MODEL, input="x", previous_response_id=first.id)
    unkept = oai.responses.create(model=MODEL, input="Hi", max_output_tokens=2, store=False)
    assert unkept.store is False
    with pytest.raises(openai.NotFoundError):
        oai.responses.retrieve(unkept.id)


def test_the_store_keeps_the_newest(oai: openai.OpenAI) -> None:
    made = [
        oai.responses.create(model=MODEL, input=f"Count {i}", max_output_tokens=2).id
        for i in range(STORE + 1)
    ]
    with pytest.raises(openai.NotFoundError):
        oai.responses.retrieve(made[0])  # the oldest went first
    assert [oai.responses.retrieve(r).id for r in made[1:]] == made[1:]


def test_responses_text_format_json_schema_is_accepted(oai: openai.OpenAI) -> None:
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
    done = oai.responses.create(
        model=MODEL,
        input="Give me an object.",
        max_output_tokens=8,
        text={"format": {"type": "json_schema", "name": "thing", "schema": schema, "strict": True}},
    )
    assert done.text is not None
    assert done.text.format.type == "json_schema"


def test_responses_errors(oai: openai.OpenAI, server: ServerProcess) -> None:
    with pytest.raises(openai.BadRequestError, match="'temperature' must be in"):
        oai.responses.create(model=MODEL, input="x", temperature=3)
    with pytest.raises(openai.BadRequestError, match="'background' is not supported"):
        oai.responses.create(model=MODEL, input="x", background=True)
    with pytest.raises(openai.NotFoundError):
        oai.responses.create(model="no_such_model", input="x")
    keyless = openai.OpenAI(base_url=server.http_url + "/v1", api_key="wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        keyless.responses.create(model=MODEL, input="x")


# -- the Messages API ----------------------------------------------------------------------------


def test_messages_stop_sequences_and_max_tokens(claude: anthropic.Anthropic) -> None:
    story = [{"role": "user", "content": "Tell me a story."}]
    full = claude.messages.create(model=MODEL, max_tokens=60, messages=story, extra_body=GREEDY)
    text = full.content[0].text  # type: ignore[union-attr]
    word = text.split()[3]
    stopped = claude.messages.create(
        model=MODEL, max_tokens=60, messages=story, extra_body=GREEDY, stop_sequences=[word]
    )
    assert (stopped.stop_reason, stopped.stop_sequence) == ("stop_sequence", word)
    assert stopped.content[0].text == text[: text.index(word)]  # type: ignore[union-attr]
    cut = claude.messages.create(model=MODEL, max_tokens=2, messages=story)
    assert (cut.stop_reason, cut.usage.output_tokens) == ("max_tokens", 2)
    with claude.messages.stream(model=MODEL, max_tokens=60, messages=story, extra_body=GREEDY,
                                stop_sequences=[word]) as stream:  # fmt: skip
        final = stream.get_final_message()
    assert (final.stop_reason, final.stop_sequence) == ("stop_sequence", word)


def test_messages_errors(claude: anthropic.Anthropic, server: ServerProcess) -> None:
    hi = [{"role": "user", "content": "hi"}]
    with pytest.raises(anthropic.BadRequestError) as bad:
        claude.messages.create(
            model=MODEL, max_tokens=5, messages=hi, extra_body={"temperature": 1.5}
        )
    assert bad.value.body == {
        "type": "error",
        "error": {"type": "invalid_request_error", "message": bad.value.body["error"]["message"]},  # type: ignore[index]
    }
    with pytest.raises(anthropic.NotFoundError) as missing:
        claude.messages.create(model="no_such_model", max_tokens=5, messages=hi)
    assert missing.value.body["error"]["type"] == "not_found_error"  # type: ignore[index]
    keyless = anthropic.Anthropic(base_url=server.http_url, api_key="wrong", max_retries=0)
    with pytest.raises(anthropic.AuthenticationError) as refused:
        keyless.messages.create(model=MODEL, max_tokens=5, messages=hi)
    assert refused.value.body["error"]["type"] == "authentication_error"  # type: ignore[index]
    with httpx.Client(base_url=server.http_url, timeout=30) as http:
        no_max = http.post(
            "/v1/messages", json={"model": MODEL, "messages": hi}, headers={"x-api-key": KEY}
        )
        assert no_max.status_code == 400
        assert no_max.json() == {
            "type": "error",
            "error": {"type": "invalid_request_error", "message": "max_tokens: Field required"},
        }
        no_key = http.post("/v1/messages/count_tokens", json={"model": MODEL, "messages": hi})
        assert no_key.status_code == 401
        assert no_key.json()["error"]["type"] == "authentication_error"


def test_the_families_are_counted_under_their_names(
    oai: openai.OpenAI, claude: anthropic.Anthropic, server: ServerProcess
) -> None:
    oai.responses.create(model=MODEL, input="hi", max_output_tokens=2)
    claude.messages.create(model=MODEL, max_tokens=2, messages=[{"role": "user", "content": "hi"}])
    metrics = httpx.get(
        server.http_url + "/metrics", headers={"authorization": f"Bearer {KEY}"}, timeout=30
    ).text
    for family in ("openai-responses", "anthropic"):
        assert f'protocol="{family}"' in metrics, family


# -- tool calls and results already in the conversation -------------------------------------------

CALL = {"id": "call_1", "type": "function", "function": {"name": "weather", "arguments": "{}"}}
WITH_TOOLS = [
    {"role": "user", "content": "What is the weather?"},
    {"role": "assistant", "content": "", "tool_calls": [CALL]},
    {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
]


def test_tool_items_render_as_the_chat_messages(
    oai: openai.OpenAI, claude: anthropic.Anthropic
) -> None:
    expected = chat_text(oai, WITH_TOOLS)  # type: ignore[arg-type]
    items: list[Any] = [
        {"role": "user", "content": "What is the weather?"},
        {"type": "function_call", "call_id": "call_1", "name": "weather", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "call_1", "output": "sunny"},
    ]
    done = oai.responses.create(model=MODEL, input=items, max_output_tokens=40, temperature=0)
    assert done.output_text == expected
    blocks: list[Any] = [
        {"role": "user", "content": "What is the weather?"},
        {"role": "assistant",
         "content": [{"type": "tool_use", "id": "call_1", "name": "weather", "input": {}}]},
        {"role": "user",
         "content": [{"type": "tool_result", "tool_use_id": "call_1", "content": "sunny"}]},
    ]  # fmt: skip
    message = claude.messages.create(model=MODEL, max_tokens=40, messages=blocks, extra_body=GREEDY)
    assert message.content[0].text == expected  # type: ignore[union-attr]
