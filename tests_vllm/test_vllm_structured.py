"""Structured outputs on ``runtime: vllm``: the constraint is handed to vLLM's own structured
outputs (``StructuredOutputsParams``), so every family's field gives what vLLM's own server
gives for its ``structured_outputs``, and what vLLM cannot compile is the family's 400."""

from __future__ import annotations

import json
import re
from typing import Any

import httpx
import jsonschema
import pytest

from tests_vllm.conftest import MODEL

SCHEMA = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "maxLength": 12},
        "sky": {"enum": ["clear", "cloudy", "rain"]},
    },
    "required": ["city", "sky"],
    "additionalProperties": False,
}
PATTERN = r"[a-z]{2,8}@[a-z]{2,6}\.(com|org)"
MESSAGES = [{"role": "user", "content": "The weather in Paris"}]
# (our request's field, vLLM's own equivalent in its server's structured_outputs)
FORMS: list[tuple[dict[str, Any], dict[str, Any]]] = [
    (
        {
            "response_format": {
                "type": "json_schema",
                "json_schema": {"name": "w", "schema": SCHEMA},
            }
        },
        {"json": SCHEMA},
    ),
    ({"guided_regex": PATTERN}, {"regex": PATTERN}),
    ({"structured_outputs": {"choice": ["yes", "no"]}}, {"choice": ["yes", "no"]}),
    ({"guided_grammar": 'root ::= "a" "b"+'}, {"grammar": 'root ::= "a" "b"+'}),
]


def chat(client: httpx.Client, extra: dict[str, Any]) -> dict[str, Any]:
    doc = {"model": MODEL, "messages": MESSAGES, "max_tokens": 40, "temperature": 0, **extra}
    reply = client.post("/v1/chat/completions", json=doc)
    assert reply.status_code == 200, reply.text
    choice: dict[str, Any] = reply.json()["choices"][0]
    return choice


@pytest.mark.parametrize(("ours", "theirs"), FORMS)
def test_each_form_answers_what_vllms_own_structured_outputs_answer(
    http: httpx.Client, vllm_http: httpx.Client, ours: dict[str, Any], theirs: dict[str, Any]
) -> None:
    expected = chat(vllm_http, {"structured_outputs": theirs})
    answer = chat(http, ours)
    assert answer["message"]["content"] == expected["message"]["content"]
    assert answer["finish_reason"] == expected["finish_reason"]


def test_a_json_schema_answer_validates(http: httpx.Client) -> None:
    (ours, _) = FORMS[0]
    choice = chat(http, ours)
    if choice["finish_reason"] == "stop":
        jsonschema.validate(json.loads(choice["message"]["content"]), SCHEMA)
    regex = chat(http, {"guided_regex": PATTERN})
    assert re.fullmatch(PATTERN, regex["message"]["content"])


def test_what_vllm_cannot_compile_is_the_familys_400(http: httpx.Client) -> None:
    doc = {"model": MODEL, "messages": MESSAGES, "guided_regex": "(ab"}
    reply = http.post("/v1/chat/completions", json=doc)
    assert reply.status_code == 400
    assert reply.json()["error"]["type"] == "invalid_request_error"
    generate = http.post("/generate", json={"prompt": "hi", "guided_regex": "(ab"})
    assert generate.status_code == 400
    assert generate.json()["error"]
