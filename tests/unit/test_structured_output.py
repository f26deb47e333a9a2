"""Every family's structured-output field read into one OutputConstraint, and every malformed
one a 400 that names the field."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from rosettaserve.core.errors import InvalidInput
from rosettaserve.core.generate import Fields
from rosettaserve.core.structured_output import (
    OLLAMA_FORMS,
    ConstraintKind,
    OutputConstraint,
    prepare_constraint,
    read_constraint,
)
from rosettaserve.protocols.openai import schema
from rosettaserve.protocols.tgi.schema import tgi_request
from rosettaserve.protocols.vllm import rest as vllm

SCHEMA = {"type": "object", "properties": {"b": {"type": "integer"}, "a": {"type": "string"}}}
SCHEMA_TEXT = '{"type":"object","properties":{"b":{"type":"integer"},"a":{"type":"string"}}}'
JSON = OutputConstraint(ConstraintKind.JSON_SCHEMA, SCHEMA_TEXT)
OBJECT = OutputConstraint(ConstraintKind.JSON_OBJECT, "")
REGEX = OutputConstraint(ConstraintKind.REGEX, "[a-z]+")
CHOICE = OutputConstraint(ConstraintKind.CHOICE, '["yes","no"]')
GBNF = OutputConstraint(ConstraintKind.GRAMMAR, 'root ::= "a"')


def chat(**fields: Any) -> OutputConstraint | None:
    doc = {"model": "m", "messages": [{"role": "user", "content": "hi"}], **fields}
    return schema.chat_request(doc, 4, 4)[0].generate.sampling.constraint


def completion(**fields: Any) -> OutputConstraint | None:
    doc = {"model": "m", "prompt": "hi", **fields}
    return schema.completion_request(doc, 4, 4).generate.sampling.constraint


def vllm_generate(**fields: Any) -> OutputConstraint | None:
    return vllm.sampling(Fields({"prompt": "hi", **fields}), 4, 4)[0].constraint


def tgi(grammar: Any) -> OutputConstraint | None:
    doc = {"inputs": "hi", "parameters": {"grammar": grammar}}
    return tgi_request(doc, 4).generate.sampling.constraint


OPENAI_READERS = [chat, completion]
VLLM_READERS = [chat, completion, vllm_generate]


def refused(call: Any, **fields: Any) -> str:
    with pytest.raises(InvalidInput) as caught:
        call(**fields)
    return caught.value.message


# -- every form ----------------------------------------------------------------------------------

OPENAI_FORMS: list[tuple[dict[str, Any], OutputConstraint | None]] = [
    ({"response_format": {"type": "text"}}, None),
    ({"response_format": {"type": "json_object"}}, OBJECT),
    ({"response_format": {"type": "json_schema", "json_schema": {"schema": SCHEMA}}}, JSON),
    (
        {
            "response_format": {
                "type": "json_schema",
                "json_schema": {"name": "x", "schema": SCHEMA, "strict": True},
            }
        },
        JSON,
    ),
]
VLLM_FORMS: list[tuple[dict[str, Any], OutputConstraint | None]] = [
    ({"structured_outputs": {"json": SCHEMA}}, JSON),
    ({"structured_outputs": {"json": SCHEMA_TEXT}}, JSON),
    ({"structured_outputs": {"regex": "[a-z]+"}}, REGEX),
    ({"structured_outputs": {"choice": ["yes", "no"]}}, CHOICE),
    ({"structured_outputs": {"grammar": 'root ::= "a"'}}, GBNF),
    ({"structured_outputs": {"json_object": True}}, OBJECT),
    ({"structured_outputs": {"regex": "[a-z]+", "disable_any_whitespace": True}}, REGEX),
    ({"guided_json": SCHEMA}, JSON),
    ({"guided_json": SCHEMA_TEXT}, JSON),
    ({"guided_regex": "[a-z]+"}, REGEX),
    ({"guided_choice": ["yes", "no"]}, CHOICE),
    ({"guided_grammar": 'root ::= "a"'}, GBNF),
    ({"guided_json": None}, None),
]


@pytest.mark.parametrize(("fields", "expected"), OPENAI_FORMS)
def test_openais_response_format_is_read_in_chat_and_completions(
    fields: dict[str, Any], expected: OutputConstraint | None
) -> None:
    for call in OPENAI_READERS:
        assert call(**fields) == expected


@pytest.mark.parametrize(("fields", "expected"), VLLM_FORMS)
def test_vllms_fields_are_read_in_chat_completions_and_its_generate(
    fields: dict[str, Any], expected: OutputConstraint | None
) -> None:
    for call in VLLM_READERS:
        assert call(**fields) == expected


@pytest.mark.parametrize(
    ("grammar", "expected"),
    [
        ({"type": "json", "value": SCHEMA}, JSON),
        ({"type": "json", "value": SCHEMA_TEXT}, JSON),
        ({"type": "regex", "value": "[a-z]+"}, REGEX),
        ({"type": "json_schema", "value": {"name": "x", "schema": SCHEMA}}, JSON),
        (None, None),
    ],
)
def test_tgis_grammar_is_read(grammar: Any, expected: OutputConstraint | None) -> None:
    assert tgi(grammar) == expected


def test_a_schema_keeps_its_key_order_which_the_output_follows() -> None:
    assert JSON.spec.index('"b"') < JSON.spec.index('"a"')


def test_no_field_is_no_constraint() -> None:
    assert chat() is None
    assert completion() is None
    assert vllm_generate() is None


# -- errors --------------------------------------------------------------------------------------

ERRORS: list[tuple[dict[str, Any], str]] = [
    ({"response_format": "json"}, "'response_format' must be an object"),
    ({"response_format": {"type": "yaml"}}, "'response_format.type' must be one of text"),
    ({"response_format": {"type": "json_schema"}}, "'response_format.json_schema' must be an"),
    (
        {"response_format": {"type": "json_schema", "json_schema": {"name": "x"}}},
        "'response_format.json_schema.schema' is required",
    ),
    (
        {"response_format": {"type": "json_schema", "json_schema": {"schema": 3}}},
        "'response_format.json_schema.schema' must be a JSON schema",
    ),
    (
        {"response_format": {"type": "json_schema", "json_schema": {"schema": {}, "strict": 1}}},
        "'response_format.json_schema.strict' must be a boolean",
    ),
    ({"guided_json": "{not json"}, "'guided_json' is not valid JSON"),
    ({"guided_json": [1]}, "'guided_json' must be a JSON schema"),
    ({"guided_regex": ""}, "'guided_regex' must be a non-empty string"),
    ({"guided_regex": 3}, "'guided_regex' must be a non-empty string"),
    ({"guided_choice": []}, "'guided_choice' must be a non-empty list"),
    ({"guided_choice": ["a", 1]}, "'guided_choice' must be a non-empty list"),
    ({"guided_grammar": ["a"]}, "'guided_grammar' must be a non-empty string"),
    ({"structured_outputs": []}, "'structured_outputs' must be an object"),
    ({"structured_outputs": {}}, "'structured_outputs' must set one of json, regex, choice"),
    (
        {"structured_outputs": {"disable_fallback": True}},
        "'structured_outputs' must set one of json",
    ),
    ({"structured_outputs": {"regex": 1}}, "'structured_outputs.regex' must be a non-empty"),
    ({"structured_outputs": {"json_object": "yes"}}, "'structured_outputs.json_object' must"),
    ({"structured_outputs": {"jsn": {}}}, "'structured_outputs.jsn' is not a field of"),
    (
        {"structured_outputs": {"regex": "a", "whitespace_pattern": " "}},
        "'structured_outputs.whitespace_pattern' is not supported by this server",
    ),
    (
        {"structured_outputs": {"regex": "a", "structural_tag": "{}"}},
        "'structured_outputs.structural_tag' is not supported by this server",
    ),
]


@pytest.mark.parametrize(("fields", "message"), ERRORS)
def test_a_malformed_field_is_a_400_naming_it(fields: dict[str, Any], message: str) -> None:
    (key,) = fields
    readers = OPENAI_READERS if key == "response_format" else VLLM_READERS
    for call in readers:
        assert refused(call, **fields).startswith(message)


@pytest.mark.parametrize(
    "fields",
    [
        {"guided_json": SCHEMA, "guided_regex": "a"},
        {"structured_outputs": {"json": SCHEMA, "regex": "a"}},
        {"structured_outputs": {"regex": "a"}, "guided_choice": ["a"]},
    ],
)
def test_two_forms_at_once_are_a_400_as_vllm_says(fields: dict[str, Any]) -> None:
    for call in VLLM_READERS:
        message = refused(call, **fields)
        assert message.startswith("You can only use one kind of structured outputs constraint")


def test_response_format_with_another_form_is_a_400_and_text_is_none() -> None:
    both = {"response_format": {"type": "json_object"}, "guided_regex": "a"}
    assert "'response_format', 'guided_regex'" in refused(chat, **both)
    assert chat(response_format={"type": "text"}, guided_regex="[a-z]+") == REGEX


@pytest.mark.parametrize(
    ("grammar", "message"),
    [
        ("json", "'parameters.grammar' must be an object"),
        ({"type": "ebnf", "value": "x"}, "'parameters.grammar.type' must be json or regex"),
        ({"type": "json", "value": "{x"}, "'parameters.grammar.value' is not valid JSON"),
        ({"type": "regex", "value": 5}, "'parameters.grammar.value' must be a non-empty string"),
    ],
)
def test_a_malformed_tgi_grammar_is_a_400_naming_it(grammar: Any, message: str) -> None:
    assert refused(tgi, grammar=grammar).startswith(message)


def test_vllms_generate_takes_its_fields_and_no_openai_one() -> None:
    message = refused(vllm_generate, response_format={"type": "json_object"})
    assert message == "SamplingParams got an unexpected keyword argument 'response_format'"


# -- the compile hook ----------------------------------------------------------------------------


class Compiler:
    def __init__(self) -> None:
        self.compiled: list[OutputConstraint] = []

    def constraint_ready(self, constraint: OutputConstraint) -> bool:
        return constraint in self.compiled

    def compile_constraint(self, constraint: OutputConstraint) -> None:
        if constraint.kind is ConstraintKind.REGEX and constraint.spec == "(":
            raise InvalidInput("the regular expression cannot be compiled: '(' is not closed")
        self.compiled.append(constraint)


def test_prepare_compiles_once_and_its_error_is_the_callers() -> None:
    compiler = Compiler()

    async def main() -> None:
        await prepare_constraint(compiler, REGEX)
        await prepare_constraint(compiler, REGEX)
        await prepare_constraint(compiler, None)
        assert compiler.compiled == [REGEX]
        with pytest.raises(InvalidInput, match="cannot be compiled"):
            await prepare_constraint(compiler, OutputConstraint(ConstraintKind.REGEX, "("))
        await prepare_constraint(object(), REGEX)  # an engine that checks for itself

    asyncio.run(main())


def test_ollamas_format_is_read_for_its_family() -> None:
    def ollama(value: Any) -> OutputConstraint | None:
        return read_constraint({"format": value}, OLLAMA_FORMS)

    assert ollama("json") == OBJECT
    assert ollama(SCHEMA) == JSON
    assert ollama("") is None
    assert ollama(None) is None
    with pytest.raises(InvalidInput, match="'format' must be \"json\" or a JSON schema"):
        ollama("yaml")
