"""The Responses and Messages APIs' readers, framers and error replies, without a server:
each request field read as the APIs define it, every refusal, the exact event sequences, and
a stream split between two instances giving the events of a whole one."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from rosettaserve.core.bounded_store import BoundedStore
from rosettaserve.core.errors import (
    InvalidInput,
    ModelError,
    ModelNotFound,
    ModelNotReady,
    NotFound,
    Overloaded,
    ServingError,
    Unauthenticated,
)
from rosettaserve.core.generate import FinishReason, GenerateDelta, Usage
from rosettaserve.core.structured_output import ConstraintKind, OutputConstraint
from rosettaserve.core.tools import ChoiceMode
from rosettaserve.protocols import families
from rosettaserve.protocols.anthropic import output as anthropic_output
from rosettaserve.protocols.anthropic import rest as anthropic
from rosettaserve.protocols.anthropic.schema import messages_request
from rosettaserve.protocols.openai import responses, responses_output
from rosettaserve.protocols.openai.responses_schema import responses_request
from tests.unit.test_llm_protocols import drain, framed

MODEL = {"model": "m"}


def read_responses(**doc: Any) -> Any:
    return responses_request({**MODEL, "input": "hi", **doc}, 4)


def read_messages(**doc: Any) -> Any:
    body = {**MODEL, "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}], **doc}
    return messages_request(body, 4)


# -- Responses: reading ----------------------------------------------------------------------------


def test_responses_input_items_become_the_chat_messages() -> None:
    items = [
        {"role": "developer", "content": "be brief"},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "a"},
                                                        {"type": "input_text", "text": "b"}]},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "c"}]},
        {"type": "function_call", "call_id": "c1", "name": "f", "arguments": '{"x": 1}'},
        {"type": "function_call", "call_id": "c2", "name": "g", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "42"},
        {"type": "reasoning", "id": "rs_1", "summary": []},
    ]  # fmt: skip
    rr = read_responses(input=items, instructions="sys")
    calls = [
        {"id": "c1", "type": "function", "function": {"name": "f", "arguments": '{"x": 1}'}},
        {"id": "c2", "type": "function", "function": {"name": "g", "arguments": "{}"}},
    ]
    assert rr.messages([{"role": "user", "content": "before"}]) == [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "before"},
        {"role": "developer", "content": "be brief"},
        {"role": "user", "content": "ab"},
        {"role": "assistant", "content": "c", "tool_calls": calls},  # one turn's output items
        {"role": "tool", "tool_call_id": "c1", "content": "42"},
    ]
    alone = read_responses(input=items[3:4]).messages([])  # calls without text: no content
    assert alone == [{"role": "assistant", "content": "", "tool_calls": calls[:1]}]


def test_responses_fields_are_read() -> None:
    rr = read_responses(
        max_output_tokens=7, temperature=0.5, top_p=0.9, store=False, stream=True,
        metadata={"k": "v"}, previous_response_id="resp_1", user="u", service_tier="auto",
        truncation="disabled", include=[], reasoning={"effort": None}, unknown_field=3,
        priority=-2,
    )  # fmt: skip
    p = rr.generate.sampling
    assert (p.max_new_tokens, p.temperature, p.top_p) == (7, 0.5, 0.9)
    assert (rr.store, rr.generate.stream, rr.metadata) == (False, True, {"k": "v"})
    assert rr.previous_response_id == "resp_1"
    assert rr.generate.add_special_tokens is False  # as chat completions render them
    assert rr.messages([]) == [{"role": "user", "content": "hi"}]
    assert p.constraint is None
    assert rr.generate.priority == -2  # vLLM's field (core/share.py)
    with pytest.raises(InvalidInput, match="'priority' must be a whole number"):
        read_responses(priority="high")


def test_responses_text_format_is_the_output_constraint() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    fmt = {"type": "json_schema", "name": "x", "schema": schema, "strict": True}
    rr = read_responses(text={"format": fmt})
    spec = orjson.dumps(schema).decode()  # its own key order: the output follows it
    assert rr.generate.sampling.constraint == OutputConstraint(ConstraintKind.JSON_SCHEMA, spec)
    assert rr.text_format == fmt
    json_object = read_responses(text={"format": {"type": "json_object"}})
    assert json_object.generate.sampling.constraint == OutputConstraint(
        ConstraintKind.JSON_OBJECT, ""
    )
    assert read_responses(text={"format": {"type": "text"}}).generate.sampling.constraint is None


def test_responses_tools_without_calls_are_accepted() -> None:
    tool = {"type": "function", "name": "f", "parameters": {"type": "object"}}
    rr = read_responses(tools=[tool], tool_choice="none", parallel_tool_calls=False)
    assert [t.name for t in rr.tools] == ["f"]
    assert (rr.tool_choice.mode, rr.tool_choice.parallel) == (ChoiceMode.NONE, False)


@pytest.mark.parametrize(
    ("doc", "says"),
    [
        ({"model": None}, "'model' is required"),
        ({"input": None}, "'input' must be a string"),
        ({"input": []}, "'input' must be a string"),
        ({"input": [{"role": "robot", "content": "x"}]}, "'input[0].role'"),
        ({"input": [{"role": "user", "content": [{"type": "input_image"}]}]}, "input_image"),
        ({"input": [{"type": "item_reference", "id": "x"}]}, "item_reference"),
        ({"input": [{"type": "function_call", "name": "f"}]}, "call_id, name, arguments"),
        ({"input": [{"type": "function_call_output", "output": "x"}]}, "call_id"),
        ({"max_output_tokens": 0}, "'max_output_tokens' must be >= 1"),
        ({"temperature": 2.5}, "'temperature' must be in"),
        ({"top_p": 0}, "'top_p' must be in"),
        ({"text": {"format": {"type": "xml"}}}, "'text.format.type'"),
        ({"text": {"format": {"type": "json_schema", "name": "x"}}}, "'text.format.schema'"),
        ({"text": {"format": {"type": "json_schema", "schema": {}}}}, "'text.format.name'"),
        ({"metadata": {"k": 1}}, "'metadata'"),
        ({"background": True}, "'background' is not supported"),
        ({"truncation": "auto"}, "'truncation' is not supported"),
        ({"include": ["message.output_text.logprobs"]}, "'include' is not supported"),
        ({"reasoning": {"effort": "high"}}, "'reasoning' is not supported"),
        ({"tools": [{"type": "function", "name": "f g"}]}, "'tools[0].name' must be 1 to 64"),
        (
            {"tools": [{"type": "function", "name": "f", "parameters": {"type": 3}}]},
            "'tools[0].parameters' is not a valid JSON schema",
        ),
        ({"tools": [{"type": "web_search"}]}, "'tools[0]' must be a function tool"),
        ({"tool_choice": {"type": "function", "name": "g"}}, "named needs 'tools'"),
        ({"tool_choice": "sometimes"}, "'tool_choice' must be"),
        ({"tool_choice": "required"}, "'tool_choice' required needs 'tools'"),
    ],
)
def test_responses_refusals(doc: dict[str, Any], says: str) -> None:
    with pytest.raises(InvalidInput, match=says.replace("[", r"\[").replace("(", r"\(")):
        read_responses(**doc)


# -- Messages: reading -----------------------------------------------------------------------------


def test_messages_blocks_become_the_chat_messages() -> None:
    conversation = [
        {"role": "user", "content": [{"type": "text", "text": "what is "},
                                     {"type": "text", "text": "6*7?"}]},
        {"role": "assistant", "content": [
            {"type": "thinking", "thinking": "hm", "signature": "s"},
            {"type": "text", "text": "let me compute"},
            {"type": "tool_use", "id": "t1", "name": "calc", "input": {"e": "6*7"}}]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "t1",
             "content": [{"type": "text", "text": "42"}]},
            {"type": "text", "text": "and so?"}]},
    ]  # fmt: skip
    mr = read_messages(messages=conversation, system=[{"type": "text", "text": "be exact"}])
    call = {
        "id": "t1",
        "type": "function",
        "function": {"name": "calc", "arguments": '{"e":"6*7"}'},
    }
    assert mr.messages == [
        {"role": "system", "content": "be exact"},
        {"role": "user", "content": "what is 6*7?"},
        {"role": "assistant", "content": "let me compute", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "t1", "content": "42"},
        {"role": "user", "content": "and so?"},
    ]


def test_messages_fields_are_read() -> None:
    mr = read_messages(
        system="sys", temperature=0.3, top_p=0.8, top_k=5, stop_sequences=["\n\n", "END"],
        metadata={"user_id": "u"}, stream=True, service_tier="auto", thinking={"type": "disabled"},
    )  # fmt: skip
    p = mr.generate.sampling
    assert (p.max_new_tokens, p.temperature, p.top_p, p.top_k) == (8, 0.3, 0.8, 5)
    assert p.stop == ("\n\n", "END")
    assert mr.generate.stream
    assert mr.messages[0] == {"role": "system", "content": "sys"}
    schema = {"type": "object"}
    fmt = read_messages(output_config={"format": {"type": "json_schema", "schema": schema}})
    assert fmt.generate.sampling.constraint == OutputConstraint(
        ConstraintKind.JSON_SCHEMA, '{"type":"object"}'
    )


def test_messages_tool_choices_are_read() -> None:
    tool = {"name": "calc", "description": "d", "input_schema": {"type": "object"}}
    mr = read_messages(tools=[tool], tool_choice={"type": "none"})
    assert [(t.name, t.description) for t in mr.tools] == [("calc", "d")]
    assert mr.tool_choice.mode is ChoiceMode.NONE
    counted = messages_request(
        {**MODEL, "messages": [{"role": "user", "content": "x"}], "tools": [tool],
         "tool_choice": {"type": "tool", "name": "calc", "disable_parallel_tool_use": True}},
        4, counting=True,
    )  # fmt: skip
    choice = counted.tool_choice
    assert (choice.mode, choice.name, choice.parallel) == (ChoiceMode.NAMED, "calc", False)


@pytest.mark.parametrize(
    ("doc", "says"),
    [
        ({"model": ""}, "model: Field required"),
        ({"max_tokens": None}, "max_tokens: Field required"),
        ({"max_tokens": 0}, "'max_tokens' must be >= 1"),
        ({"messages": []}, "messages: must be a non-empty list"),
        ({"messages": [{"role": "system", "content": "x"}]}, "messages.0.role"),
        ({"messages": [{"role": "user", "content": 3}]}, "messages.0.content"),
        ({"messages": [{"role": "user", "content": [{"type": "image"}]}]}, "'image' block"),
        (
            {"messages": [{"role": "user", "content": [{"type": "tool_use", "id": "x"}]}]},
            "'tool_use' block is not supported here",
        ),
        (
            {"messages": [{"role": "assistant", "content": [{"type": "tool_use", "id": "x"}]}]},
            "needs a string id and name",
        ),
        ({"system": [{"type": "image"}]}, "system.0: must be a text block"),
        ({"system": 5}, "system: must be a string"),
        ({"temperature": 1.5}, "'temperature' must be in"),
        ({"top_k": -1}, "'top_k' must be >= 0"),
        ({"stop_sequences": [""]}, "'stop_sequences'"),
        ({"thinking": {"type": "enabled", "budget_tokens": 1024}}, "thinking: not supported"),
        ({"mcp_servers": [{"url": "x"}]}, "mcp_servers: not supported"),
        ({"output_config": {"effort": "high"}}, "output_config.effort"),
        ({"output_config": {"format": {"type": "regex"}}}, "output_config.format"),
        ({"tools": [{"name": "calc!", "input_schema": {}}]}, "'tools.0.name' must be 1 to 64"),
        ({"tools": [{"type": "bash_20250124", "name": "bash"}]}, "only client tools"),
        ({"tool_choice": {"type": "sometimes"}}, "tool_choice: must be"),
        ({"tool_choice": {"type": "tool", "name": "x"}}, "which tools lacks"),
        ({"tool_choice": {"type": "any"}}, "tool_choice: any needs tools"),
    ],
)
def test_messages_refusals(doc: dict[str, Any], says: str) -> None:
    with pytest.raises(InvalidInput, match=says):
        read_messages(**doc)


# -- errors --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("exc", "status", "kind"),
    [
        (InvalidInput("bad"), 400, "invalid_request_error"),
        (Unauthenticated("no key"), 401, "authentication_error"),
        (ModelNotFound("no model"), 404, "not_found_error"),
        (Overloaded("full", headers={"retry-after": "1"}), 529, "overloaded_error"),
        (ModelError("broke"), 500, "api_error"),
        (ModelNotReady("loading"), 503, "api_error"),
    ],
)
def test_anthropic_error_shape(exc: ServingError, status: int, kind: str) -> None:
    reply = anthropic.error_response(exc)
    assert reply.status == status
    assert orjson.loads(reply.body) == {
        "type": "error",
        "error": {"type": kind, "message": exc.message},
    }
    assert reply.headers == exc.headers  # retry-after kept


def test_responses_errors_are_openai_errors() -> None:
    reply = responses.error_response(NotFound("Response with id 'x' not found."))
    assert reply.status == 404
    assert orjson.loads(reply.body)["error"]["type"] == "invalid_request_error"


# -- streams -------------------------------------------------------------------------------------


def delta(text: str, finish: FinishReason | None = None, stop: str | None = None) -> Any:
    d = GenerateDelta(0, text, [1], [False])
    if finish is not None:
        d.finish_reason, d.stop_reason, d.usage = finish, stop, Usage(3, 2)
    return d


async def deltas(*items: GenerateDelta) -> Any:
    for d in items:
        yield d


def events(chunks: list[bytes]) -> list[tuple[str, dict[str, Any]]]:
    out = []
    for event in b"".join(chunks).split(b"\n\n"):
        if event:
            name, data = event.split(b"\n")
            out.append((name.removeprefix(b"event: ").decode(), orjson.loads(data[6:])))
    return out


def responses_framer(store: BoundedStore[Any] | None = None) -> responses_output.ResponsesFramer:
    rr = read_responses(stream=True)
    head = responses_output.Head("resp_1", "msg_1", 5, "m", rr, store is not None)
    keeper = responses.Keeper(BoundedStore(0) if store is None else store, head, [])
    return responses_output.ResponsesFramer(head, None, keeper)


def test_responses_stream_events() -> None:
    store: BoundedStore[Any] = BoundedStore(4)
    made = drain(
        framed(responses_framer(store), deltas(delta("Hel"), delta("lo", FinishReason.EOS)))
    )
    seen = events(made)
    assert [name for name, _ in seen] == [
        "response.created", "response.in_progress", "response.output_item.added",
        "response.content_part.added", "response.output_text.delta", "response.output_text.delta",
        "response.output_text.done", "response.content_part.done", "response.output_item.done",
        "response.completed",
    ]  # fmt: skip
    assert [doc["sequence_number"] for _, doc in seen] == list(range(10))
    assert all(doc["type"] == name for name, doc in seen)
    final = seen[-1][1]["response"]
    assert final["status"] == "completed"
    assert final["output"][0]["content"][0]["text"] == "Hello"
    assert final["usage"]["input_tokens"] == 3
    assert final["usage"]["total_tokens"] == 5
    kept = store.get("resp_1")
    assert kept is not None
    assert kept["response"] == final
    assert kept["items"] == final["output"]  # what a later request continues from


def test_responses_stream_cut_by_max_output_tokens_is_incomplete() -> None:
    seen = events(drain(framed(responses_framer(), deltas(delta("a", FinishReason.LENGTH)))))
    name, doc = seen[-1]
    assert name == "response.incomplete"
    assert doc["response"]["status"] == "incomplete"
    assert doc["response"]["incomplete_details"] == {"reason": "max_output_tokens"}


def test_responses_stream_split_continues_the_sequence() -> None:
    """A decode instance's framer saw the prefill instance's deltas: its events carry on."""
    items = [delta("a"), delta("b"), delta("c", FinishReason.EOS)]
    whole = responses_framer()
    expected = [whole.head(), *(whole.chunk(d) for d in items)]
    split = responses_framer()
    split.seen(items[0])
    assert [split.chunk(d) for d in items[1:]] == expected[2:]


async def failing() -> Any:
    yield delta("Hel")
    raise ModelError("the model failed")


def test_responses_stream_failure() -> None:
    seen = events(drain(framed(responses_framer(), failing())))
    (error_name, error), (failed_name, failed) = seen[-2:]
    assert (error_name, error["message"], error["code"]) == (
        "error",
        "the model failed",
        "server_error",
    )
    assert failed_name == "response.failed"
    assert failed["response"]["status"] == "failed"
    assert failed["sequence_number"] == error["sequence_number"] + 1
    scheduler = events([responses.stream_error(ModelError("lost"), b"")])
    assert scheduler == [("error", {"type": "error", "code": "server_error", "message": "lost",
                                    "param": None})]  # fmt: skip


def test_messages_stream_events() -> None:
    framer = anthropic.MessagesFramer("msg_1", "m", 3)
    made = drain(framed(framer, deltas(delta("Hel"), delta("lo", FinishReason.STOP, "END"))))
    seen = events(made)
    assert [name for name, _ in seen] == [
        "message_start", "content_block_start", "ping", "content_block_delta",
        "content_block_delta", "content_block_stop", "message_delta", "message_stop",
    ]  # fmt: skip
    assert all(doc["type"] == name for name, doc in seen)
    start = seen[0][1]["message"]
    assert (start["id"], start["content"], start["usage"]["input_tokens"]) == ("msg_1", [], 3)
    assert seen[3][1]["delta"] == {"type": "text_delta", "text": "Hel"}
    assert seen[6][1]["delta"] == {"stop_reason": "stop_sequence", "stop_sequence": "END"}
    assert seen[6][1]["usage"] == {"output_tokens": 2}


def test_messages_stream_failure_is_an_error_event() -> None:
    seen = events(drain(framed(anthropic.MessagesFramer("msg_1", "m", 3), failing())))
    error = {"type": "api_error", "message": "the model failed"}
    assert seen[-1] == ("error", {"type": "error", "error": error})


@pytest.mark.parametrize(
    ("finish", "stop", "expected"),
    [
        (FinishReason.EOS, None, ("end_turn", None)),
        (FinishReason.LENGTH, None, ("max_tokens", None)),
        (FinishReason.STOP, "END", ("stop_sequence", "END")),
        (FinishReason.STOP, 7, ("end_turn", None)),  # a stop token of the model's own
    ],
)
def test_anthropic_stop_reasons(finish: FinishReason, stop: Any, expected: Any) -> None:
    assert anthropic_output.stop(finish, stop) == expected


# -- the store and the families' table -------------------------------------------------------------


def test_the_store_drops_the_oldest() -> None:
    store: BoundedStore[int] = BoundedStore(2)
    for i, key in enumerate("abc"):
        store.put(key, i)
    assert (store.get("a"), store.get("b"), store.get("c"), len(store)) == (None, 1, 2, 2)
    assert store.pop("b") == 1
    assert store.pop("b") is None
    nothing: BoundedStore[int] = BoundedStore(0)
    nothing.put("a", 1)
    assert nothing.get("a") is None


def test_the_families_table_splits_only_generation() -> None:
    assert families.endpoint_of("/v1/responses") is not None
    assert families.endpoint_of("/v1/messages") is not None
    assert families.endpoint_of("/v1/messages/count_tokens") is None  # served whole
    assert families.text_field("/v1/responses", b"{}") == "input"
    assert families.text_field("/v1/messages", b"{}") == "messages"
    assert {f.name for f in families.FAMILIES} >= {"openai-responses", "anthropic"}
