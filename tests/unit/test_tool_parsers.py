"""The tool parsers (protocols/tools/): vLLM's meaning on whole texts, and streams that add up
to exactly the whole text's answer however the text is cut."""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rosettaserve.protocols.tools import (
    PARSERS,
    REQUIRED,
    ToolParser,
    ToolStream,
    extract,
    named_parser,
)
from rosettaserve.protocols.tools.jsonscan import scan_json

ARGS: list[Any] = [
    {"city": "Paris", "unit": "celsius"},
    {},
    {"n": 1.50, "big": 12345678901234567890, "neg": -2e-3, "ok": True, "none": None},
    {"nested": {"list": [1, [2, {"x": "y"}], []], "empty": {}}},
    {"text": 'quote " backslash \\ slash / newline \n tab \t é 😀 \u0001'},
]


def dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


def calls_of(parser: ToolParser, text: str) -> tuple[str | None, list[tuple[str, str]]]:
    found = extract(parser, text)
    return found.content, [(c.name, c.arguments) for c in found.calls]


# -- whole texts, vLLM's cases ------------------------------------------------------------------


def test_hermes_calls_and_content() -> None:
    text = (
        "Let me look.\n<tool_call>\n"
        + dumps({"name": "get_weather", "arguments": ARGS[0]})
        + "\n</tool_call>\n<tool_call>\n"
        + '{"name":"now","arguments":{}}\n</tool_call>'
    )
    assert calls_of(PARSERS["hermes"], text) == (
        "Let me look.\n",
        [("get_weather", dumps(ARGS[0])), ("now", "{}")],
    )


@pytest.mark.parametrize("args", ARGS)
def test_arguments_are_json_dumps_of_the_value(args: Any) -> None:
    compact = json.dumps({"name": "f", "arguments": args}, separators=(",", ":"))
    content, calls = calls_of(PARSERS["hermes"], f"<tool_call>{compact}</tool_call>")
    assert content is None
    assert calls == [("f", dumps(json.loads(json.dumps(args))))]


def test_hermes_without_a_call_is_content() -> None:
    assert calls_of(PARSERS["hermes"], "Just text <tool") == ("Just text <tool", [])


def test_hermes_unclosed_block_at_the_end_still_counts() -> None:
    text = '<tool_call>{"name": "f", "arguments": {"a": 1}}'
    assert calls_of(PARSERS["hermes"], text) == (None, [("f", '{"a": 1}')])


def test_hermes_broken_before_the_name_is_all_content() -> None:
    text = "Hi <tool_call>{not json}</tool_call>"
    assert calls_of(PARSERS["hermes"], text) == (text, [])


def test_llama3_json() -> None:
    text = '<|python_tag|>{"name": "f", "parameters": {"x": 1}}; {"name": "g", "arguments": {}}'
    assert calls_of(PARSERS["llama3_json"], text) == (None, [("f", '{"x": 1}'), ("g", "{}")])
    assert calls_of(PARSERS["llama3_json"], '{"name": "f", "parameters": {}}') == (
        None,
        [("f", "{}")],
    )
    assert calls_of(PARSERS["llama3_json"], "The answer is 4.") == ("The answer is 4.", [])


def test_mistral_both_formats() -> None:
    listed = (
        'Sure[TOOL_CALLS] [{"name": "f", "arguments": {"x": "a"}}, {"name": "g", "arguments": {}}]'
    )
    assert calls_of(PARSERS["mistral"], listed) == ("Sure", [("f", '{"x": "a"}'), ("g", "{}")])
    v11 = '[TOOL_CALLS]f[ARGS]{"x": 1}[TOOL_CALLS]g[ARGS]{}'
    assert calls_of(PARSERS["mistral"], v11) == (None, [("f", '{"x": 1}'), ("g", "{}")])
    found = extract(PARSERS["mistral"], v11)
    assert all(len(c.id) == 9 and c.id.isalnum() for c in found.calls)


def test_pythonic() -> None:
    text = '[get_weather(city="Paris", days=[1, 2], opts={"a": None}, on=True, t=-1.5), now()]'
    args = {"city": "Paris", "days": [1, 2], "opts": {"a": None}, "on": True, "t": -1.5}
    assert calls_of(PARSERS["pythonic"], text) == (
        None,
        [("get_weather", dumps(args)), ("now", "{}")],
    )
    assert calls_of(PARSERS["pythonic"], "[not a call]") == ("[not a call]", [])
    assert calls_of(PARSERS["pythonic"], "Hello") == ("Hello", [])
    assert calls_of(PARSERS["pythonic"], "[f(1)]") == ("[f(1)]", [])  # positional: refused


def test_required_output() -> None:
    text = '[{"name": "f", "parameters": {"x": 1}}, {"name": "g", "parameters": {}}]'
    assert calls_of(REQUIRED, text) == (None, [("f", '{"x": 1}'), ("g", "{}")])


def test_named_output_is_the_arguments_as_written() -> None:
    assert calls_of(named_parser("f"), '{"x":1}') == (None, [("f", '{"x":1}')])


def test_ids_are_openai_tool_ids() -> None:
    found = extract(PARSERS["hermes"], '<tool_call>{"name": "f", "arguments": {}}</tool_call>')
    assert found.calls[0].id.startswith("chatcmpl-tool-")


# -- streamed == whole --------------------------------------------------------------------------


def streamed(parser: ToolParser, pieces: list[str]) -> tuple[str | None, list[tuple[str, str]]]:
    """What a client that adds up the stream's deltas ends with; checks each call's first
    delta carries its id and name and later ones only arguments."""
    stream = ToolStream(parser)
    content = ""
    calls: list[list[str]] = []
    for k, piece in enumerate(pieces):
        text, deltas = stream.feed(piece, final=k == len(pieces) - 1)
        content += text
        for d in deltas:
            if d.index == len(calls):
                assert d.id
                assert d.name
                calls.append([d.name, d.arguments])
            else:
                assert d.index < len(calls)
                assert d.id is None
                assert d.name is None
                calls[d.index][1] += d.arguments
    result = [(name, args) for name, args in calls]
    return (content if content or not calls else None), result


def split(text: str, cuts: list[int]) -> list[str]:
    points = sorted({min(c, len(text)) for c in cuts})
    bounds = [0, *points, len(text)]
    return [text[a:b] for a, b in itertools.pairwise(bounds)] or [""]


def hermes_text(draw: st.DrawFn) -> str:
    parts = [draw(st.sampled_from(["", "Sure. ", "x < y <tool", "a\n"]))]
    for _ in range(draw(st.integers(0, 3))):
        args = draw(st.sampled_from(ARGS))
        body = json.dumps({"name": draw(st.sampled_from(["f", "get_weather"])), "arguments": args})
        if draw(st.booleans()):
            body = json.dumps({"arguments": args, "name": "g"}, indent=1)
        if draw(st.booleans()):
            body = body[: draw(st.integers(0, len(body)))]  # broken or cut short
        parts.append(f"<tool_call>\n{body}\n</tool_call>\n")
    text = "".join(parts)
    return text[: draw(st.integers(0, len(text)))] if draw(st.booleans()) else text


def pythonic_text(draw: st.DrawFn) -> str:
    calls = [
        draw(st.sampled_from(['f(a=1, b="x\\"y")', "now()", "g(l=[1, {'k': None}], t=-2.5)"]))
        for _ in range(draw(st.integers(0, 3)))
    ]
    text = "[" + ", ".join(calls) + "]"
    text = draw(st.sampled_from([text, "plain text", "[f(1)]", "[f(a=b)]"]))
    return text[: draw(st.integers(0, len(text)))] if draw(st.booleans()) else text


def json_list_text(draw: st.DrawFn, prefix: str, key: str) -> str:
    items = [
        {"name": draw(st.sampled_from(["f", "g"])), key: draw(st.sampled_from(ARGS))}
        for _ in range(draw(st.integers(0, 3)))
    ]
    text = prefix + json.dumps(items)
    return text[: draw(st.integers(0, len(text)))] if draw(st.booleans()) else text


def llama_text(draw: st.DrawFn) -> str:
    objs = [
        json.dumps({"name": "f", draw(st.sampled_from(["parameters", "arguments"])): a})
        for a in draw(st.lists(st.sampled_from(ARGS), max_size=3))
    ]
    text = draw(st.sampled_from(["", "<|python_tag|>"])) + "; ".join(objs)
    text = draw(st.sampled_from([text, "no call here"]))
    return text[: draw(st.integers(0, len(text)))] if draw(st.booleans()) else text


def mistral_text(draw: st.DrawFn) -> str:
    if draw(st.booleans()):
        return json_list_text(
            draw, draw(st.sampled_from(["", "ok "])) + "[TOOL_CALLS]", "arguments"
        )
    text = "".join(
        f"[TOOL_CALLS]{draw(st.sampled_from(['f', 'get_weather']))}[ARGS]{dumps(a)}"
        for a in draw(st.lists(st.sampled_from(ARGS), max_size=3))
    )
    return text[: draw(st.integers(0, len(text)))] if draw(st.booleans()) else text


@st.composite
def cases(draw: st.DrawFn) -> tuple[ToolParser, str, list[int]]:
    kind = draw(st.sampled_from(["hermes", "pythonic", "required", "llama3_json", "mistral"]))
    text = {
        "hermes": hermes_text,
        "pythonic": pythonic_text,
        "required": lambda d: json_list_text(d, draw(st.sampled_from(["", " "])), "parameters"),
        "llama3_json": llama_text,
        "mistral": mistral_text,
    }[kind](draw)
    parser = REQUIRED if kind == "required" else PARSERS[kind]
    cuts = draw(st.lists(st.integers(0, max(len(text), 1)), max_size=12))
    return parser, text, cuts


@settings(max_examples=400, deadline=None)
@given(cases())
def test_streamed_adds_up_to_the_whole_answer(case: tuple[ToolParser, str, list[int]]) -> None:
    parser, text, cuts = case
    assert streamed(parser, split(text, cuts)) == calls_of(parser, text)


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(ARGS), st.data())
def test_every_char_streamed_alone(args: Any, data: st.DataObject) -> None:
    text = "<tool_call>" + json.dumps({"name": "f", "arguments": args}) + "</tool_call>"
    pieces = [*list(text), ""]
    assert streamed(PARSERS["hermes"], pieces) == calls_of(PARSERS["hermes"], text)


@settings(max_examples=300, deadline=None)
@given(
    st.recursive(
        st.none()
        | st.booleans()
        | st.integers()
        | st.floats(allow_nan=False, allow_infinity=False)
        | st.text(),
        lambda inner: (
            st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
        ),
        max_leaves=8,
    )
)
def test_json_scan_is_json_dumps(value: Any) -> None:
    text = json.dumps(
        value, ensure_ascii=bool(len(str(value)) % 2), indent=len(str(value)) % 3 or None
    )
    scan = scan_json(text, 0, True)
    assert scan.canon == dumps(json.loads(text))
    assert scan.end == len(text)
    for k in range(len(text)):  # each prefix says a prefix of the whole
        assert dumps(json.loads(text)).startswith(scan_json(text[:k], 0, False).canon)


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(ARGS), st.sampled_from(ARGS), st.data())
def test_a_memo_resumes_only_a_text_that_goes_on(a: Any, b: Any, data: st.DataObject) -> None:
    """A stream's memo (where the last read stopped) never changes what a text says, even
    handed a text that does not go on from the one it was made on."""
    first, second = json.dumps(a), json.dumps(b)
    memo: dict[int, Any] = {}
    scan_json(first[: data.draw(st.integers(0, len(first)))], 0, False, memo)
    cut = data.draw(st.integers(0, len(second)))
    for final in (False, True):
        assert scan_json(second[:cut], 0, final, memo) == scan_json(second[:cut], 0, final)
