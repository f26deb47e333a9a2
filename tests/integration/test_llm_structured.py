"""Structured outputs on a real server with the clients people use: the openai SDK's
``response_format`` and vLLM's fields, the ``text-generation`` client's ``grammar``, vLLM's
``/generate``; answers always match what was asked, unconstrained answers beside them stay
what they are alone, and what cannot compile is a 400 in each family's error shape."""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import jsonschema
import openai
import pytest
from text_generation import Client as TgiClient
from text_generation import errors as tgi_errors
from text_generation.types import Grammar, GrammarType

from tests.conftest import EXAMPLES
from tests.serverproc import ServerProcess, served, start_server

SCHEMA = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "maxLength": 12},
        "temperature": {"type": "integer", "minimum": -50, "maximum": 60},
        "sky": {"enum": ["clear", "cloudy", "rain"]},
    },
    "required": ["city", "temperature", "sky"],
    "additionalProperties": False,
}
PATTERN = r"[a-z]{2,8}@[a-z]{2,6}\.(com|org)"
CHOICES = ["yes", "no", "maybe"]
MESSAGES = [{"role": "user", "content": "What is the weather in Paris?"}]
RESPONSE_FORMAT = {
    "type": "json_schema",
    "json_schema": {"name": "weather", "schema": SCHEMA, "strict": True},
}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    repo = tmp_path_factory.mktemp("structured_repo")
    shutil.copytree(EXAMPLES / "tiny_llama", repo / "tiny_llama")
    yield from served(start_server(repo))


@pytest.fixture(scope="module")
def oai(server: ServerProcess) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.http_url + "/v1", api_key="unused", max_retries=0)


def weather(text: str) -> dict[str, Any]:
    doc = json.loads(text)
    jsonschema.validate(doc, SCHEMA)
    assert isinstance(doc, dict)
    return doc


# -- OpenAI --------------------------------------------------------------------------------------


def test_chat_response_format_json_schema_streamed_and_not(oai: openai.OpenAI) -> None:
    for temperature, seed in ((0.0, None), (1.0, 7), (1.0, 8)):
        reply = oai.chat.completions.create(
            model="tiny_llama",
            messages=MESSAGES,  # type: ignore[arg-type]
            response_format=RESPONSE_FORMAT,  # type: ignore[arg-type]
            temperature=temperature,
            seed=seed,
            max_tokens=80,
        )
        choice = reply.choices[0]
        assert choice.finish_reason == "stop"
        weather(choice.message.content or "")
        chunks = oai.chat.completions.create(
            model="tiny_llama",
            messages=MESSAGES,  # type: ignore[arg-type]
            response_format=RESPONSE_FORMAT,  # type: ignore[arg-type]
            temperature=temperature,
            seed=seed,
            max_tokens=80,
            stream=True,
        )
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        assert text == choice.message.content


def test_chat_json_object(oai: openai.OpenAI) -> None:
    reply = oai.chat.completions.create(
        model="tiny_llama",
        messages=MESSAGES,  # type: ignore[arg-type]
        response_format={"type": "json_object"},
        temperature=0,
        max_tokens=80,
    )
    choice = reply.choices[0]
    if choice.finish_reason == "stop":  # (a tiny model may write a key until the limit)
        assert isinstance(json.loads(choice.message.content or ""), dict)
    else:
        assert (choice.message.content or "").startswith("{")


def test_completions_guided_regex_and_choice(oai: openai.OpenAI) -> None:
    for prompt in ("The quick brown", "Once upon a time", "hi"):
        for n, temperature in ((1, 0.0), (3, 1.0)):
            regex = oai.completions.create(
                model="tiny_llama",
                prompt=prompt,
                max_tokens=40,
                n=n,
                temperature=temperature,
                extra_body={"guided_regex": PATTERN},
            )
            for c in regex.choices:
                assert c.finish_reason == "stop"
                assert re.fullmatch(PATTERN, c.text), c.text
            choice = oai.completions.create(
                model="tiny_llama",
                prompt=prompt,
                max_tokens=40,
                n=n,
                temperature=temperature,
                extra_body={"guided_choice": CHOICES},
            )
            assert all(c.text in CHOICES for c in choice.choices)


def test_chat_structured_outputs_grammar(oai: openai.OpenAI) -> None:
    gbnf = 'root ::= "x=" [0-9]{1,3} (";" "x=" [0-9]{1,3})*'
    reply = oai.chat.completions.create(
        model="tiny_llama",
        messages=MESSAGES,  # type: ignore[arg-type]
        max_tokens=60,
        temperature=0,
        extra_body={"structured_outputs": {"grammar": gbnf}},
    )
    text = reply.choices[0].message.content or ""
    assert reply.choices[0].finish_reason == "stop"
    assert re.fullmatch(r"x=[0-9]{1,3}(;x=[0-9]{1,3})*", text), text


# -- TGI and vLLM's /generate --------------------------------------------------------------------


def test_tgi_grammar_with_the_text_generation_client(server: ServerProcess) -> None:
    client = TgiClient(server.http_url, timeout=60)
    json_grammar = Grammar(type=GrammarType.Json, value=SCHEMA)
    done = client.generate("The weather:", max_new_tokens=80, grammar=json_grammar)
    assert done.details.finish_reason.value == "eos_token"
    weather(done.generated_text)
    streamed = client.generate_stream("The weather:", max_new_tokens=80, grammar=json_grammar)
    assert "".join(r.token.text for r in streamed if not r.token.special) == done.generated_text
    regex_grammar = Grammar(type=GrammarType.Regex, value=PATTERN)
    done = client.generate("Mail me at", max_new_tokens=40, do_sample=True, seed=3,
                           grammar=regex_grammar)  # fmt: skip
    assert re.fullmatch(PATTERN, done.generated_text), done.generated_text


def test_vllm_generate_structured_outputs(server: ServerProcess) -> None:
    for field in ({"structured_outputs": {"choice": CHOICES}}, {"guided_choice": CHOICES}):
        doc = {"prompt": "Is it raining?", "max_tokens": 20, "temperature": 0, **field}
        reply = httpx.post(server.http_url + "/generate", json=doc, timeout=60)
        assert reply.status_code == 200, reply.text
        (text,) = reply.json()["text"]
        assert text.removeprefix("Is it raining?") in CHOICES


# -- many at once --------------------------------------------------------------------------------


def chat(server: ServerProcess, prompt: str, constrained: bool) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "model": "tiny_llama",
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": 60,
        "temperature": 0,
    }
    if constrained:
        doc["response_format"] = RESPONSE_FORMAT
    reply = httpx.post(server.http_url + "/v1/chat/completions", json=doc, timeout=120)
    assert reply.status_code == 200, reply.text
    choice: dict[str, Any] = reply.json()["choices"][0]
    return choice


def test_32_concurrent_constrained_and_unconstrained(server: ServerProcess) -> None:
    prompts = [f"Tell me about city number {i}" for i in range(16)]
    alone = [chat(server, p, False)["message"]["content"] for p in prompts]
    jobs = [(p, c) for p in prompts for c in (False, True)]
    with ThreadPoolExecutor(32) as pool:
        answers = list(pool.map(lambda job: chat(server, *job), jobs))
    unconstrained = [
        a["message"]["content"] for a, (_, c) in zip(answers, jobs, strict=True) if not c
    ]
    assert unconstrained == alone
    for answer, (_, constrained) in zip(answers, jobs, strict=True):
        if constrained:
            assert answer["finish_reason"] == "stop"
            weather(answer["message"]["content"])


# -- what cannot compile -------------------------------------------------------------------------

BAD = [
    ({"guided_regex": "(ab"}, "the regular expression cannot be compiled"),
    ({"guided_grammar": "root ::= missing"}, 'Rule "missing" is not defined'),
    ({"guided_json": {"type": "object", "properties": {"a": {"$ref": "#/nowhere"}}}}, "nowhere"),
]


@pytest.mark.parametrize(("field", "message"), BAD)
def test_what_cannot_compile_is_a_400_in_each_familys_shape(
    server: ServerProcess, field: dict[str, Any], message: str
) -> None:
    url = server.http_url
    doc = {"model": "tiny_llama", "messages": MESSAGES, **field}
    for stream in (False, True):
        r = httpx.post(url + "/v1/chat/completions", json={**doc, "stream": stream}, timeout=60)
        assert r.status_code == 400
        error = r.json()["error"]
        assert error["type"] == "invalid_request_error"
        assert message in error["message"]
    r = httpx.post(url + "/generate", json={"prompt": "hi", **field}, timeout=60)
    assert r.status_code == 400
    assert message in r.json()["error"]
    assert r.json()["error_type"] == "Bad Request"


def test_a_bad_tgi_grammar_is_a_400_in_tgis_shape(server: ServerProcess) -> None:
    client = TgiClient(server.http_url, timeout=60)
    with pytest.raises(tgi_errors.ValidationError, match="cannot be compiled"):
        client.generate("hi", grammar=Grammar(type=GrammarType.Regex, value="(ab"))
    doc = {"inputs": "hi", "parameters": {"grammar": {"type": "yaml", "value": "x"}}}
    for path in ("/generate", "/generate_stream"):
        r = httpx.post(server.http_url + path, json=doc, timeout=60)
        assert r.status_code == 400
        assert r.json() == {
            "error": "'parameters.grammar.type' must be json or regex, got 'yaml'",
            "error_type": "validation",
        }
