"""Ollama's /api/generate and /api/chat requests read into the OpenAI requests they mean (and
their 400s), model names with tags, and the NDJSON lines a stream becomes."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from rosettaserve.core.errors import InvalidInput
from rosettaserve.core.generate import FinishReason, GenerateDelta, Usage
from rosettaserve.core.structured_output import ConstraintKind
from rosettaserve.protocols import families
from rosettaserve.protocols.ollama import rest, schema
from rosettaserve.protocols.openai.rest import chat_tool_plan

USER = [{"role": "user", "content": "weather in Paris?"}]
WEATHER: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}
WINDOW = 512


def chat(**fields: Any) -> schema.OllamaRequest:
    return schema.chat_request({"model": "m", "messages": USER, **fields}, 4, WINDOW)


def generate(trusted: bool = False, **fields: Any) -> schema.OllamaRequest:
    doc = {"model": "m", "prompt": "hi", **fields}
    return schema.generate_request(doc, 4, WINDOW, trusted)


def refused(read: Any, **fields: Any) -> str:
    with pytest.raises(InvalidInput) as caught:
        read(**fields)
    return caught.value.message


def test_names_with_tags() -> None:
    assert schema.split_name("m") == ("m", "")
    assert schema.split_name("m:latest") == ("m", "")
    assert schema.split_name("m:3") == ("m", "3")
    with pytest.raises(InvalidInput):
        schema.split_name("m:q4_0")


def test_options_are_ollamas_sampling_names() -> None:
    opts = {"temperature": 0.5, "top_p": 0.5, "top_k": 7, "num_predict": 9, "seed": 3}
    opts |= {"repeat_penalty": 1.2, "presence_penalty": 0.5, "frequency_penalty": 0.25}
    params = chat(options=opts | {"stop": ["x"], "num_ctx": WINDOW}).oa.generate.sampling
    assert (params.temperature, params.top_p, params.top_k) == (0.5, 0.5, 7)
    assert (params.max_new_tokens, params.seed, params.repetition_penalty) == (9, 3, 1.2)
    assert (params.presence_penalty, params.frequency_penalty) == (0.5, 0.25)
    assert params.stop == ("x",)


def test_defaults_are_ollamas_and_zero_temperature_is_greedy() -> None:
    ol = chat()
    params = ol.oa.generate.sampling
    assert (params.temperature, params.top_k, params.top_p) == (0.8, 40, 0.9)
    assert params.max_new_tokens is None
    assert params.repetition_penalty == 1.0
    assert ol.oa.generate.stream  # Ollama streams unless told not to
    greedy = chat(options={"temperature": 0}, stream=False)
    assert greedy.oa.generate.sampling.temperature == 0.0
    assert greedy.oa.generate.sampling.top_k == 0
    assert not greedy.oa.generate.stream


def test_num_predict_and_seed_sentinels_mean_no_limit_and_a_random_seed() -> None:
    for sentinel in (-1, -2):
        params = chat(options={"num_predict": sentinel, "seed": -1}).oa.generate.sampling
        assert params.max_new_tokens is None
        assert params.seed is None


def test_options_not_built_are_refused_unless_neutral() -> None:
    assert "min_p" in refused(chat, options={"min_p": 0.1})
    assert "mirostat" in refused(chat, options={"mirostat": 2})
    assert "num_ctx" in refused(chat, options={"num_ctx": WINDOW + 1})
    assert "num_predict" in refused(chat, options={"num_predict": 0})
    neutral = {"min_p": 0.0, "typical_p": 1.0, "mirostat": 0, "num_gpu": 99, "num_thread": 2}
    assert chat(options=neutral).oa.generate.sampling.temperature == 0.8


def test_format_json_and_schema() -> None:
    assert chat(format="json").oa.generate.sampling.constraint is not None
    kind = chat(format="json").oa.generate.sampling.constraint
    assert kind is not None
    assert kind.kind is ConstraintKind.JSON_OBJECT
    shaped = chat(format={"type": "object"}).oa.generate.sampling.constraint
    assert shaped is not None
    assert shaped.kind is ConstraintKind.JSON_SCHEMA
    assert chat(format="").oa.generate.sampling.constraint is None
    assert "format" in refused(chat, format="yaml")


def test_fields_not_built_are_refused() -> None:
    assert "images" in refused(generate, images=["aGk="])
    assert "context" in refused(generate, context=[1, 2])
    assert "think" in refused(chat, think=True)
    bad = [{"role": "user", "content": "x", "images": ["aGk="]}]
    assert "images" in refused(chat, messages=bad)
    assert "template" in refused(generate, template="{{ .Prompt }}")
    assert generate(context=[], images=None, think=False).messages is not None


def test_a_trusted_template_is_a_jinja_chat_template() -> None:
    ol = generate(trusted=True, template="{{ messages[0]['content'] }}")
    assert ol.oa.chat is not None
    assert ol.oa.chat.template == "{{ messages[0]['content'] }}"


def test_generate_is_a_chat_of_system_and_prompt_unless_raw() -> None:
    ol = generate(system="be brief")
    assert ol.messages == [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "hi"},
    ]
    raw = generate(raw=True, system="ignored")
    assert raw.messages is None
    assert raw.oa.generate.prompt == "hi"


def test_an_empty_prompt_or_no_messages_is_a_load_request() -> None:
    assert generate(prompt="").load_only
    assert chat(messages=[]).load_only
    assert "num_ctx" in refused(generate, prompt="", options={"num_ctx": WINDOW * 2})
    with pytest.raises(InvalidInput):
        schema.generate_request({"prompt": ""}, 4, WINDOW, False)  # still needs a model


def test_tool_calls_take_object_arguments_and_results_find_their_call() -> None:
    messages = [
        *USER,
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {"function": {"name": "a", "arguments": {"x": 1}}},
                {"function": {"name": "b", "arguments": {}}},
            ],
        },
        {"role": "tool", "tool_name": "b", "content": "B"},
        {"role": "tool", "content": "A"},
    ]
    ol = chat(messages=messages, tools=[WEATHER])
    assert ol.messages is not None
    said, b, a = ol.messages[1], ol.messages[2], ol.messages[3]
    # OpenAI's reader hands the template the arguments as an object, as chat's calls are
    assert [c["function"]["arguments"] for c in said["tool_calls"]] == [{"x": 1}, {}]
    ids = [c["id"] for c in said["tool_calls"]]
    assert (b["tool_call_id"], a["tool_call_id"]) == (ids[1], ids[0])
    assert ol.oa.tools is not None
    assert [s.name for s in ol.oa.tools.specs] == ["get_weather"]


def lines(out: bytes) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in out.splitlines()]


def test_the_stream_is_ndjson_lines_then_the_done_line() -> None:
    framer = rest.OllamaFramer(rest.Shape("m:latest", False, 0), None)
    first = lines(framer.chunk(GenerateDelta(0, "Hel", [1])))
    assert [(x["model"], x["response"], x["done"]) for x in first] == [("m:latest", "Hel", False)]
    end = GenerateDelta(0, "lo", [2], finish_reason=FinishReason.LENGTH, usage=Usage(5, 2))
    text, done = lines(framer.chunk(end))
    assert text["response"] == "lo"
    assert done["done"]
    assert done["done_reason"] == "length"
    assert done["response"] == ""
    assert (done["prompt_eval_count"], done["eval_count"], done["load_duration"]) == (5, 2, 0)
    assert {"total_duration", "prompt_eval_duration", "eval_duration"} <= done.keys()
    assert framer.head() == framer.tail() == b""
    assert lines(framer.error(InvalidInput("boom"))) == [{"error": "boom"}]


def test_a_chats_streamed_calls_come_whole_before_the_done_line() -> None:
    ol = chat(tools=[WEATHER])
    plan = chat_tool_plan(ol.oa, {"tool_parser": "hermes"}, "m")
    framer = rest.OllamaFramer(rest.Shape("m", True, 0), plan)
    call = '<tool_call>{"name": "get_weather", "arguments": {"city": "Oslo"}}</tool_call>'
    out = b"".join(framer.chunk(GenerateDelta(0, part, [1])) for part in (call[:20], call[20:]))
    stop = GenerateDelta(0, "", [2], finish_reason=FinishReason.STOP, usage=Usage(5, 9))
    got = lines(out + framer.chunk(stop))
    calls, done = got[-2], got[-1]
    assert calls["message"]["tool_calls"] == [
        {"function": {"name": "get_weather", "arguments": {"city": "Oslo"}}}
    ]
    assert done["done"]
    assert done["done_reason"] == "stop"
    assert all(not x["message"]["content"] for x in got)  # the call's text is not content


def test_the_family_row_and_its_error_shape() -> None:
    found = families.endpoint_of("/api/chat")
    assert found is not None
    assert found[0].name == "ollama"
    assert families.text_field("/api/generate", b"{}") == "prompt"
    assert families.endpoint_of("/api/show") is None  # served whole, never split
    reply = rest.error_response(InvalidInput("bad"))
    assert (reply.status, orjson.loads(reply.body)) == (400, {"error": "bad"})


@pytest.mark.parametrize("chat", [False, True])
def test_a_text_line_is_the_line_a_dict_would_give(chat: bool) -> None:
    shape = rest.Shape('m "q"', chat, 0)
    text = 'say "hi"\n\\ ☃ \x00'
    got = orjson.loads(shape.text_line(text))
    want = shape.line(text, None, None)
    assert got.keys() == want.keys()
    assert got | {"created_at": ""} == want | {"created_at": ""}
    assert got["created_at"].endswith("Z")


@pytest.mark.parametrize(
    ("value", "seconds"),
    [(0, 0.0), ("0", 0.0), ("5m", 300.0), ("1h30m", 5400.0), ("300ms", 0.3), (2.5, 2.5)],
)
def test_keep_alive_is_seconds_or_a_duration(value: object, seconds: float) -> None:
    assert schema.keep_alive_seconds({"keep_alive": value}) == seconds


def test_keep_alive_negative_or_absent() -> None:
    assert schema.keep_alive_seconds({"keep_alive": "-1"}) == -1.0  # for ever
    assert schema.keep_alive_seconds({}) is None  # the model's own unload_after_idle


@pytest.mark.parametrize("value", ["soon", "5q", "", True, [1]])
def test_what_is_not_a_duration_is_refused(value: object) -> None:
    with pytest.raises(InvalidInput, match="keep_alive must be a duration"):
        schema.keep_alive_seconds({"keep_alive": value})
