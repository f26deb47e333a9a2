"""OpenAI chat and completions requests -> GenerateRequest (with vLLM's accepted extras)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from rosettaserve.core.errors import InvalidInput
from rosettaserve.core.generate import Fields, GenerateRequest
from rosettaserve.core.sampling_fields import PENALTIES, STOPS, Field, SamplingTable, read_sampling

ROLES = ("system", "developer", "user", "assistant", "tool")
MAX_TOP_LOGPROBS = 20
COMPLETIONS_DEFAULT_MAX_TOKENS = 16  # OpenAI's default for /v1/completions
UNSUPPORTED = ("tools", "functions", "logit_bias", "suffix")


@dataclass
class OpenAIRequest:
    model: str
    generate: GenerateRequest
    include_usage: bool = False
    echo: bool = False  # completions: the prompt comes first in the text
    top_logprobs: int | None = None  # None: no logprobs asked


# OpenAI's sampling fields, with the extras vLLM's OpenAI server accepts (top_k, penalties...)
SAMPLING = SamplingTable(
    fields=(
        Field("max_new_tokens", ("max_completion_tokens", "max_tokens"), "int", 1),
        Field("temperature", ("temperature",), "number", 0.0, 2.0),
        Field("top_p", ("top_p",), "number", 0.0, 1.0, lo_open=True),
        Field("top_k", ("top_k",), "int", -1),  # vLLM: -1 and 0 mean off
        *PENALTIES,
        *STOPS,
    ),
)
COMPLETIONS_SAMPLING = replace(SAMPLING, max_tokens=COMPLETIONS_DEFAULT_MAX_TOKENS)


def model_name(doc: Mapping[str, Any]) -> str:
    model = Fields(doc).string("model")
    if not model:
        raise InvalidInput("'model' is required: the name of a served model (GET /v1/models)")
    return model


def _common(f: Fields, max_n: int) -> tuple[str, int, bool, bool]:
    model = model_name(f.doc)
    for key in UNSUPPORTED:
        if f.doc.get(key):
            raise InvalidInput(f"'{key}' is not supported by this server")
    stream = f.boolean("stream", False)
    options = f.object("stream_options")
    if options.doc and not stream:
        raise InvalidInput("'stream_options' may only be set when 'stream' is true")
    n = f.integer("n", 1, 1, max_n) or 1
    return model, n, stream, options.boolean("include_usage", False)


def chat_request(
    doc: dict[str, Any], max_n: int, max_stop: int
) -> tuple[OpenAIRequest, list[dict[str, Any]]]:
    """The request (its prompt still unset) and the messages for the chat template."""
    f = Fields(doc)
    model, n, stream, include_usage = _common(f, max_n)
    messages = chat_messages(doc.get("messages"))
    want = f.boolean("logprobs", False)
    top = f.integer("top_logprobs", None, 0, MAX_TOP_LOGPROBS)
    if top is not None and not want:
        raise InvalidInput("'top_logprobs' needs 'logprobs': true")
    params = read_sampling(f, SAMPLING, max_stop)
    params.logprobs, params.top_logprobs = want, top or 0
    request = GenerateRequest(sampling=params, n=n, stream=stream)
    return OpenAIRequest(
        model, request, include_usage, top_logprobs=(top or 0) if want else None
    ), messages


def chat_messages(value: Any) -> list[dict[str, Any]]:
    if not isinstance(value, list) or not value:
        raise InvalidInput("'messages' must be a non-empty list of {role, content} objects")
    return [_message(i, m) for i, m in enumerate(value)]


def _message(i: int, message: Any) -> dict[str, Any]:
    if not isinstance(message, dict):
        raise InvalidInput(f"'messages[{i}]' must be an object")
    role = message.get("role")
    if role not in ROLES:
        raise InvalidInput(f"'messages[{i}].role' must be one of {', '.join(ROLES)}, got {role!r}")
    return {"role": role, "content": _content(i, message.get("content"))}


def _content(i: int, content: Any) -> str:
    if content is None or isinstance(content, str):
        return content or ""
    if isinstance(content, list):
        texts = []
        for part in content:
            if not isinstance(part, dict) or part.get("type") != "text":
                raise InvalidInput(f"'messages[{i}].content' parts must be text parts")
            if not isinstance(part.get("text"), str):
                raise InvalidInput(f"'messages[{i}].content' text parts need a string 'text'")
            texts.append(part["text"])
        return "".join(texts)
    raise InvalidInput(f"'messages[{i}].content' must be a string or a list of text parts")


def completion_request(doc: dict[str, Any], max_n: int, max_stop: int) -> OpenAIRequest:
    f = Fields(doc)
    model, n, stream, include_usage = _common(f, max_n)
    best_of = f.integer("best_of", None, 1)
    if best_of is not None and best_of != n:
        raise InvalidInput("'best_of' different from 'n' is not supported")
    top = f.integer("logprobs", None, 0, MAX_TOP_LOGPROBS)
    params = read_sampling(f, COMPLETIONS_SAMPLING, max_stop)
    params.logprobs, params.top_logprobs = top is not None, top or 0
    request = GenerateRequest(sampling=params, n=n, stream=stream)
    _set_prompt(request, doc.get("prompt"))
    return OpenAIRequest(model, request, include_usage, f.boolean("echo", False), top)


def _set_prompt(request: GenerateRequest, prompt: Any) -> None:
    """A string, a list of token ids, or a one-element list of either."""
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str | list):
        prompt = prompt[0]
    if isinstance(prompt, str) and prompt:
        request.prompt = prompt
    elif (
        isinstance(prompt, list)
        and prompt
        and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt)
    ):
        request.prompt_token_ids = list(prompt)
    elif isinstance(prompt, list) and len(prompt) > 1:
        raise InvalidInput("several prompts in one request are not supported; send one each")
    else:
        raise InvalidInput("'prompt' must be a non-empty string or a list of token ids")
