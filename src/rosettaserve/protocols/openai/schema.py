"""OpenAI chat and completions requests -> GenerateRequest (with vLLM's accepted extras).

Every field of OpenAI's API and of vLLM's OpenAI server is either built as vLLM builds it or,
set to anything that would change the answer, refused with a 400 (``NOT_BUILT``); fields that
change nothing of the answer (``user``, ``store``, ``metadata``, ``service_tier``,
``request_id``, ``length_penalty`` without beam search, ...) are
accepted. vLLM's chat template fields (``chat_templates.py``) and chat's tools (``tools.py``)
are built.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from rosettaserve.core import share
from rosettaserve.core.errors import InvalidInput
from rosettaserve.core.generate import ChatTemplate, Fields, GenerateRequest, SamplingParams
from rosettaserve.core.sampling_fields import (
    NOT_BUILT_EXTRAS,
    PENALTIES,
    STOPS,
    Field,
    SamplingTable,
    read_sampling,
    refuse_unspaced_special_tokens,
)
from rosettaserve.core.structured_output import OPENAI_FORMS, read_constraint
from rosettaserve.protocols.openai.chat_templates import chat_template
from rosettaserve.protocols.openai.tools import ChatTools, message_extras, read_tools

ROLES = ("system", "developer", "user", "assistant", "tool")
MAX_TOP_LOGPROBS = 20  # vLLM's default max_logprobs
COMPLETIONS_DEFAULT_MAX_TOKENS = 16  # OpenAI's default for /v1/completions
# Fields not built here: accepted only when absent, empty (null, false, 0, "", [], {}) or one of
# the neutral values listed, which change nothing; anything else is a 400.
NOT_BUILT: Mapping[str, tuple[Any, ...]] = {
    # OpenAI's
    "logit_bias": (),
    "suffix": (),
    "reasoning_effort": (),
    "modalities": (["text"],),
    "audio": (),
    "prediction": (),
    "web_search_options": (),
    # vLLM's
    "use_beam_search": (),
    "structural_tag": (),
    "allowed_token_ids": (),
    "bad_words": (),
    "logits_processors": (),
    "truncate_prompt_tokens": (),
    "mm_processor_kwargs": (),
    "cache_salt": (),
    "return_tokens_as_token_ids": (),
    "return_token_ids": (),
    "kv_transfer_params": (),
    "vllm_xargs": (),
}
CHAT_NOT_BUILT: Mapping[str, tuple[Any, ...]] = {"echo": ()}  # vLLM's chat echo
# chat's tools (tools.py) have no meaning for a completion
COMPLETIONS_NOT_BUILT: Mapping[str, tuple[Any, ...]] = {
    "tools": (),
    "functions": (),
    "tool_choice": ("none", "auto"),  # without tools, as good as none
    "function_call": ("none", "auto"),
}


@dataclass
class OpenAIRequest:
    model: str
    generate: GenerateRequest
    include_usage: bool = False
    echo: bool = False  # completions: the prompt comes first in the text
    top_logprobs: int | None = None  # None: no logprobs asked
    chat: ChatTemplate | None = None  # chat: how the messages become the prompt
    tools: ChatTools | None = None  # chat: the tools offered and how to choose among them


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
    refused=NOT_BUILT_EXTRAS,
)
COMPLETIONS_SAMPLING = replace(SAMPLING, max_tokens=COMPLETIONS_DEFAULT_MAX_TOKENS)


def model_name(doc: Mapping[str, Any]) -> str:
    model = Fields(doc).string("model")
    if not model:
        raise InvalidInput("'model' is required: the name of a served model (GET /v1/models)")
    return model


def _common(
    f: Fields, max_n: int, not_built: Mapping[str, tuple[Any, ...]] = NOT_BUILT
) -> tuple[str, int, bool, bool]:
    model = model_name(f.doc)
    refuse_not_built(f, not_built)
    stream = f.boolean("stream", False)
    options = f.object("stream_options")
    if options.doc and not stream:
        raise InvalidInput("'stream_options' may only be set when 'stream' is true")
    n = f.integer("n", 1, 1, max_n) or 1
    best_of = f.integer("best_of", None, 1)
    if best_of is not None and best_of != n:
        raise InvalidInput("'best_of' different from 'n' is not supported")
    return model, n, stream, options.boolean("include_usage", False)


def read_priority(f: Fields) -> int | None:
    """vLLM's ``priority``: lower is served earlier, 0 the default (core/share.py)."""
    value = f.doc.get("priority")
    return None if value is None else share.priority(value, "'priority'")


def refuse_not_built(f: Fields, not_built: Mapping[str, tuple[Any, ...]]) -> None:
    for key in sorted(f.doc.keys() & not_built.keys()):
        value = f.doc[key]
        if value and value not in not_built[key]:
            raise InvalidInput(f"'{key}' is not supported by this server")


def prompt_logprobs(f: Fields, params: SamplingParams, stream: bool) -> None:
    """vLLM's ``prompt_logprobs``: each prompt token's logprob and its top k alternatives (the
    engine computes them, or the generation plane refuses the request)."""
    top = f.integer("prompt_logprobs", None, 0, MAX_TOP_LOGPROBS)
    if top is not None and stream:
        raise InvalidInput("'prompt_logprobs' are not available when 'stream' is true")
    params.prompt_logprobs = top


def chat_request(
    doc: dict[str, Any], max_n: int, max_stop: int, trusted_template: bool = False
) -> tuple[OpenAIRequest, list[dict[str, Any]]]:
    """The request (its prompt still unset) and the messages for the chat template;
    ``trusted_template``: a template of the request's own is rendered (else refused)."""
    f = Fields(doc)
    model, n, stream, include_usage = _common(f, max_n, {**NOT_BUILT, **CHAT_NOT_BUILT})
    messages = chat_messages(doc.get("messages"))
    want = f.boolean("logprobs", False)
    top = f.integer("top_logprobs", None, 0, MAX_TOP_LOGPROBS)
    if top is not None and not want:
        raise InvalidInput("'top_logprobs' needs 'logprobs': true")
    params = read_sampling(f, SAMPLING, max_stop)
    refuse_unspaced_special_tokens(f, params)
    params.logprobs, params.top_logprobs = want, top or 0
    params.constraint = read_constraint(doc, OPENAI_FORMS)
    prompt_logprobs(f, params, stream)
    request = GenerateRequest(sampling=params, n=n, stream=stream, priority=read_priority(f))
    request.add_special_tokens = f.boolean("add_special_tokens", False)  # vLLM's chat default
    chat = chat_template(f, trusted_template)
    top_logprobs = (top or 0) if want else None
    oa = OpenAIRequest(model, request, include_usage, top_logprobs=top_logprobs, chat=chat)
    oa.tools = read_tools(f)
    return oa, messages


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
    return {"role": role, "content": _content(i, message.get("content"))} | message_extras(
        i, message
    )


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
    model, n, stream, include_usage = _common(f, max_n, {**NOT_BUILT, **COMPLETIONS_NOT_BUILT})
    top = f.integer("logprobs", None, 0, MAX_TOP_LOGPROBS)
    params = read_sampling(f, COMPLETIONS_SAMPLING, max_stop)
    refuse_unspaced_special_tokens(f, params)
    params.logprobs, params.top_logprobs = top is not None, top or 0
    params.constraint = read_constraint(doc, OPENAI_FORMS)
    prompt_logprobs(f, params, stream)
    request = GenerateRequest(sampling=params, n=n, stream=stream, priority=read_priority(f))
    request.add_special_tokens = f.boolean("add_special_tokens", True)  # vLLM's default
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
