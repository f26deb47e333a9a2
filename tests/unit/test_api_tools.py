"""Tool calls over the Responses and Messages APIs, without a server: a text with calls,
streamed in pieces of any size, adds up (as the SDKs accumulate events) to the non-streamed
answer; a split stream carries on a whole one's events; the call ids are the response's."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from rosettaserve.core.generate import Completion, FinishReason, GenerateDelta, Usage
from rosettaserve.core.tools import ChoiceMode, ToolChoice, ToolSpec
from rosettaserve.protocols.anthropic import output as messages_output
from rosettaserve.protocols.openai import responses_output
from rosettaserve.protocols.openai.responses_schema import input_messages, responses_request
from rosettaserve.protocols.tools.choice import ToolPlan, family_plan, tool_plan
from tests.unit.test_responses_messages import events

WEATHER = ToolSpec("get_weather", "", {"type": "object", "properties": {"city": {}}})
CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
TEXT = "Let me look. " + CALL + CALL.replace("Paris", "Rome")
PLAN = tool_plan([WEATHER], ToolChoice(), {"tool_parser": "hermes"}, "m")
USAGE = Usage(3, 40)


def pieces(text: str, size: int) -> list[GenerateDelta]:
    cut = [text[i : i + size] for i in range(0, len(text), size)]
    out = [GenerateDelta(0, piece, []) for piece in cut]
    out[-1].finish_reason, out[-1].usage = FinishReason.EOS, USAGE
    return out


def head() -> responses_output.Head:
    rr = responses_request({"model": "m", "input": "hi", "stream": True}, 4)
    return responses_output.Head("resp_r1", "msg_r1", 5, "m", rr, False)


def replayed(kept: list[Any]) -> Any:
    return kept.append


def sdk_items(seen: list[tuple[str, dict[str, Any]]]) -> list[dict[str, Any]]:
    """The output items as the openai SDK's stream accumulator builds them."""
    items: list[dict[str, Any]] = []
    for name, doc in seen:
        if name == "response.output_item.added":
            assert doc["output_index"] == len(items)
            items.append(doc["item"])
        elif name == "response.output_text.delta":
            content = items[doc["output_index"]]["content"]
            if not content:
                content.append(responses_output.text_part(""))
            content[0]["text"] += doc["delta"]
        elif name == "response.function_call_arguments.delta":
            items[doc["output_index"]]["arguments"] += doc["delta"]
    return items


@pytest.mark.parametrize("size", [1, 3, 1000])
def test_responses_streamed_calls_add_up_to_the_whole_answer(size: int) -> None:
    kept: list[Any] = []
    framer = responses_output.ResponsesFramer(head(), PLAN, replayed(kept))
    seen = events([framer.head(), *(framer.chunk(d) for d in pieces(TEXT, size))])
    body = responses_output.whole(head(), PLAN, TEXT, FinishReason.EOS, USAGE)
    assert seen[-1][1]["response"]["output"] == body["output"]
    assert [(i["type"], i.get("name")) for i in body["output"]] == [
        ("message", None), ("function_call", "get_weather"), ("function_call", "get_weather"),
    ]  # fmt: skip
    assert body["output"][0]["content"][0]["text"] == "Let me look. "
    assert [orjson.loads(i["arguments"]) for i in body["output"][1:]] == [
        {"city": "Paris"}, {"city": "Rome"},
    ]  # fmt: skip
    assert [(i["id"], i["call_id"]) for i in body["output"][1:]] == [
        ("fc_r1_0", "call_r1_0"), ("fc_r1_1", "call_r1_1"),
    ]  # fmt: skip
    accumulated = sdk_items(seen)
    assert [i.get("arguments") for i in accumulated] == [i.get("arguments") for i in body["output"]]
    assert accumulated[0]["content"][0]["text"] == "Let me look. "
    done = [doc["item"] for name, doc in seen if name == "response.output_item.done"]
    assert done == body["output"]
    assert [doc["sequence_number"] for _, doc in seen] == list(range(len(seen)))
    assert kept == [seen[-1][1]["response"]]
    # a later request continues from the output items: one assistant turn, text and calls
    [said] = input_messages(body["output"])
    assert said["content"] == "Let me look. "
    assert said["tool_calls"][1] == {
        "id": "call_r1_1",
        "type": "function",
        "function": {"name": "get_weather", "arguments": '{"city": "Rome"}'},
    }


def test_responses_with_only_calls_have_no_message_item() -> None:
    kept: list[Any] = []
    framer = responses_output.ResponsesFramer(head(), PLAN, replayed(kept))
    seen = events([framer.head(), *(framer.chunk(d) for d in pieces(CALL, 7))])
    assert [name for name, _ in seen] == [
        "response.created", "response.in_progress", "response.output_item.added",
        *["response.function_call_arguments.delta"] * 3,
        "response.function_call_arguments.done", "response.output_item.done",
        "response.completed",
    ]  # fmt: skip
    assert seen[2][1]["item"]["status"] == "in_progress"
    body = responses_output.whole(head(), PLAN, CALL, FinishReason.EOS, USAGE)
    assert [i["type"] for i in body["output"]] == ["function_call"]
    assert body["output"] == seen[-1][1]["response"]["output"]


def test_responses_split_stream_with_calls_carries_on() -> None:
    items = pieces(TEXT, 9)
    whole = responses_output.ResponsesFramer(head(), PLAN, replayed([]))
    expected = [whole.head(), *(whole.chunk(d) for d in items)]
    split = responses_output.ResponsesFramer(head(), PLAN, replayed([]))
    for d in items[:5]:
        split.seen(d)
    assert [split.chunk(d) for d in items[5:]] == expected[6:]


def test_responses_without_calls_is_one_message() -> None:
    body = responses_output.whole(head(), PLAN, "Sunny.", FinishReason.EOS, USAGE)
    assert [i["type"] for i in body["output"]] == ["message"]
    assert input_messages(body["output"]) == [{"role": "assistant", "content": "Sunny."}]
    empty = responses_output.whole(head(), PLAN, "", FinishReason.LENGTH, USAGE)
    assert empty["output"][0]["content"][0]["text"] == ""
    assert empty["status"] == "incomplete"


# -- Messages ------------------------------------------------------------------------------------


def sdk_message(seen: list[tuple[str, dict[str, Any]]]) -> dict[str, Any]:
    """The message as the anthropic SDK accumulates a stream (tool inputs from their JSON)."""
    message: dict[str, Any] = {}
    buffers: dict[int, str] = {}
    for name, doc in seen:
        if name == "message_start":
            message = doc["message"]
        elif name == "content_block_start":
            assert doc["index"] == len(message["content"])
            message["content"].append(doc["content_block"])
        elif name == "content_block_delta" and doc["delta"]["type"] == "text_delta":
            message["content"][doc["index"]]["text"] += doc["delta"]["text"]
        elif name == "content_block_delta":
            buffers[doc["index"]] = buffers.get(doc["index"], "") + doc["delta"]["partial_json"]
        elif name == "content_block_stop" and doc["index"] in buffers:
            message["content"][doc["index"]]["input"] = orjson.loads(buffers[doc["index"]])
        elif name == "message_delta":
            message |= doc["delta"]
            message["usage"]["output_tokens"] = doc["usage"]["output_tokens"]
    return message


def whole_message(text: str, plan: ToolPlan | None) -> dict[str, Any]:
    done = Completion(0, text, finish_reason=FinishReason.EOS, usage=USAGE)
    body: dict[str, Any] = messages_output.whole("msg_m1", "m", plan, done, USAGE)
    return body


def test_messages_streamed_tool_use_adds_up_to_the_whole_message() -> None:
    framer = messages_output.Framer("msg_m1", "m", 3, PLAN)
    seen = events([framer.head(), *(framer.chunk(d) for d in pieces(TEXT, 4))])
    body = whole_message(TEXT, PLAN)
    assert body["stop_reason"] == "tool_use"
    assert body["content"] == [
        {"type": "text", "text": "Let me look. "},
        {"type": "tool_use", "id": "toolu_m1_0", "name": "get_weather",
         "input": {"city": "Paris"}},
        {"type": "tool_use", "id": "toolu_m1_1", "name": "get_weather", "input": {"city": "Rome"}},
    ]  # fmt: skip
    starts = [doc["index"] for name, doc in seen if name == "content_block_start"]
    stops = [doc["index"] for name, doc in seen if name == "content_block_stop"]
    assert starts == stops == [0, 1, 2]  # one after another, each stopped before the next
    assert sdk_message(seen) == body


def test_messages_split_stream_with_calls_carries_on() -> None:
    items = pieces(TEXT, 9)
    whole = messages_output.Framer("msg_m1", "m", 3, PLAN)
    expected = [whole.head(), *(whole.chunk(d) for d in items)]
    split = messages_output.Framer("msg_m1", "m", 3, PLAN)
    for d in items[:5]:
        split.seen(d)
    assert [split.chunk(d) for d in items[5:]] == expected[6:]


def test_messages_answer_in_words_ends_its_turn() -> None:
    body = whole_message("It is sunny.", PLAN)
    assert (body["content"], body["stop_reason"]) == (
        [{"type": "text", "text": "It is sunny."}],
        "end_turn",
    )


def test_the_family_plan_offers_the_tools_in_chats_shape() -> None:
    params = responses_request({"model": "m", "input": "hi"}, 4).generate.sampling
    plan, chat = family_plan([WEATHER], ToolChoice(ChoiceMode.REQUIRED), {}, "m", params)
    assert plan is not None
    assert chat is not None
    assert params.constraint == plan.constraint is not None
    assert chat.tools == (
        {"type": "function", "function": {"name": "get_weather", "description": "",
                                          "parameters": dict(WEATHER.parameters)}},
    )  # fmt: skip
    unplanned = family_plan([WEATHER], ToolChoice(ChoiceMode.NONE), {}, "m", params)
    assert unplanned == (None, None)
