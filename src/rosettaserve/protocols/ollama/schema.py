"""Ollama's ``/api/generate`` and ``/api/chat`` requests -> the OpenAI chat and completion
requests they mean, read by OpenAI's own readers (protocols/openai/schema.py), so a chat's
messages, tools and template go through one piece of code and its greedy text is the chat
completion's.

- ``/api/chat``: ``messages`` (roles system, user, assistant, tool; an assistant's
  ``tool_calls`` with ``function.arguments`` as an object; a tool result's ``tool_name``),
  ``tools`` (OpenAI's shape), ``format``, ``options``, ``stream`` (default true).
- ``/api/generate``: ``prompt`` and ``system`` as a system and a user message through the
  model's chat template; ``raw``: the prompt as it is (a completion); ``template``: a Jinja chat
  template of the request's own, only where request templates are trusted
  (``--trust-request-chat-template``; Ollama's Go templates are not rendered).
- ``options``: ``OPTIONS`` (Ollama's sampling names); the runtime's knobs (``num_gpu``,
  ``num_thread``, ``num_batch``, ...) change nothing of the answer and are accepted; the
  sampling options not built are refused unless neutral; ``num_ctx`` is accepted up to the
  model's window. Defaults: Ollama's (temperature 0.8, top_k 40, top_p 0.9); no repeat penalty
  unless asked (``repeat_last_n``'s window is not built: a penalty reads every token).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from rosettaserve.core.errors import InvalidInput
from rosettaserve.core.generate import Fields
from rosettaserve.core.sampling_fields import Field, Refused, SamplingTable, read_sampling
from rosettaserve.core.structured_output import OLLAMA_FORMS, read_constraint
from rosettaserve.protocols.openai import schema as openai_schema
from rosettaserve.protocols.openai.schema import OpenAIRequest

DEFAULT_TOP_K, DEFAULT_TOP_P = 40, 0.9  # Ollama's defaults (api/types.go DefaultOptions)
OPTIONS = SamplingTable(
    fields=(
        Field("max_new_tokens", ("num_predict",), "int", 1),
        Field("temperature", ("temperature",), "number", 0.0, 2.0),
        Field("top_p", ("top_p",), "number", 0.0, 1.0, lo_open=True),
        Field("top_k", ("top_k",), "int", 0),  # 0: off
        Field("seed", ("seed",), "int", 0, 2**63 - 1),
        Field("repetition_penalty", ("repeat_penalty",), "number", 0.0, 100.0, lo_open=True),
        Field("presence_penalty", ("presence_penalty",), "number", -2.0, 2.0),
        Field("frequency_penalty", ("frequency_penalty",), "number", -2.0, 2.0),
        Field("stop", ("stop",), "strings"),
    ),
    refused=(  # sampling Ollama has and the engine does not: accepted when neutral
        Refused("min_p", "number", 0.0, 0.0, 1.0),
        Refused("typical_p", "number", 1.0, 0.0, 1.0),
        Refused("tfs_z", "number", 1.0, 0.0),
        Refused("mirostat", "int", 0, 0, 2),
        Refused("num_keep", "int", 0, -1),
    ),
    default_temperature=0.8,
)
# top-level fields not built: accepted when absent or empty (null, false, "", [], {})
NOT_BUILT = ("suffix", "context", "images", "think", "logprobs", "top_logprobs")
LOAD = "load"  # the done_reason of a request with nothing to generate (a load request)


@dataclass
class OllamaRequest:
    model: str
    oa: OpenAIRequest  # the same request in OpenAI's terms (its prompt unset for a chat)
    messages: list[dict[str, Any]] | None  # None: raw (the prompt is the text)
    load_only: bool = False  # empty prompt or messages: answered at once, nothing generated


def model_name(doc: Mapping[str, Any]) -> str:
    model = doc.get("model")
    if not isinstance(model, str) or not model:
        raise InvalidInput("model is required")
    return model


def split_name(name: str) -> tuple[str, str]:
    """``NAME:TAG`` -> (NAME, version): the tag ``latest`` (or none) is the highest ready
    version, a number that version."""
    base, _, tag = name.partition(":")
    if tag in ("", "latest"):
        return base, ""
    if not tag.isdigit():
        raise InvalidInput(f'model "{name}": a tag is latest or a version number')
    return base, tag


def refuse_not_built(doc: Mapping[str, Any]) -> None:
    for key in NOT_BUILT:
        if doc.get(key):
            raise InvalidInput(f"{key} is not supported by this server")


def chat_request(doc: dict[str, Any], max_stop: int, window: int) -> OllamaRequest:
    refuse_not_built(doc)
    messages = doc.get("messages")
    if messages is not None and not isinstance(messages, list):
        raise InvalidInput("messages must be a list of {role, content}")
    if not messages:
        return _load(doc, max_stop, window)
    body = {"model": model_name(doc), "messages": openai_messages(messages)}
    if doc.get("tools"):
        body["tools"] = doc["tools"]
    oa, read = openai_schema.chat_request(body, 1, max_stop)
    _sampling(oa, doc, max_stop, window)
    return OllamaRequest(oa.model, oa, read)


def generate_request(
    doc: dict[str, Any], max_stop: int, window: int, trusted: bool
) -> OllamaRequest:
    refuse_not_built(doc)
    f = Fields(doc)
    prompt = f.string("prompt") or ""
    if not prompt:
        return _load(doc, max_stop, window)
    model = model_name(doc)
    if f.boolean("raw", False):
        oa = openai_schema.completion_request({"model": model, "prompt": prompt}, 1, max_stop)
        _sampling(oa, doc, max_stop, window)
        return OllamaRequest(model, oa, None)
    system = f.string("system") or ""
    messages = [{"role": "system", "content": system}] if system else []
    body: dict[str, Any] = {"model": model, "messages": [*messages, _user(prompt)]}
    if f.string("template"):
        if not trusted:
            raise InvalidInput(
                "template: a request's own template is not rendered by this server unless it "
                "runs with --trust-request-chat-template (and then as a Jinja chat template)"
            )
        body["chat_template"] = doc["template"]
    oa, read = openai_schema.chat_request(body, 1, max_stop, trusted)
    _sampling(oa, doc, max_stop, window)
    return OllamaRequest(model, oa, read)


def _user(text: str) -> dict[str, str]:
    return {"role": "user", "content": text}


def _load(doc: dict[str, Any], max_stop: int, window: int) -> OllamaRequest:
    """A load request (no prompt, no messages): its fields are still checked."""
    model = model_name(doc)
    oa = openai_schema.completion_request({"model": model, "prompt": "-"}, 1, max_stop)
    _sampling(oa, doc, max_stop, window)
    return OllamaRequest(model, oa, None, load_only=True)


def _sampling(oa: OpenAIRequest, doc: dict[str, Any], max_stop: int, window: int) -> None:
    """``options``, ``format`` and ``stream`` onto the OpenAI request."""
    f = Fields(doc)
    options = f.object("options")
    opts = dict(options.doc)
    if isinstance(opts.get("num_predict"), int) and opts["num_predict"] in (-1, -2):
        del opts["num_predict"]  # Ollama's "until the end" and "fill the window": no limit
    if isinstance(opts.get("seed"), int) and opts["seed"] < 0:
        del opts["seed"]  # Ollama's -1: a random seed
    num_ctx = Fields(opts, "options").integer("num_ctx", None, 1)
    if num_ctx is not None and num_ctx > window:
        raise InvalidInput(f"options.num_ctx: {num_ctx} is beyond the model's window of {window}")
    params = read_sampling(Fields(opts, "options"), OPTIONS, max_stop)
    if "top_k" not in opts and params.temperature > 0:
        params.top_k = DEFAULT_TOP_K
    if "top_p" not in opts and params.temperature > 0:
        params.top_p = DEFAULT_TOP_P
    params.constraint = read_constraint(doc, OLLAMA_FORMS)
    oa.generate.sampling = params
    oa.generate.stream = f.boolean("stream", True)
    keep_alive_seconds(doc)


def keep_alive_seconds(doc: dict[str, Any]) -> float | None:
    """``keep_alive``: how long the model stays loaded unused after this request, in seconds
    (a number, or a duration as Ollama writes it: "5m", "1h30m", "0"; negative: for ever);
    None when the request does not say."""
    value = doc.get("keep_alive")
    if value is None:
        return None
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, str):
        text = value.strip()
        sign = -1.0 if text.startswith("-") else 1.0
        parts = _DURATION_PART.findall(text.lstrip("+-"))
        if parts and "".join(n + u for n, u in parts) == text.lstrip("+-"):
            return sign * sum(float(n) * _DURATION_UNITS[u or "s"] for n, u in parts)
    raise InvalidInput('keep_alive must be a duration ("5m") or a number of seconds')


_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ns|us|µs|ms|s|m|h|)")
_DURATION_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


# -- messages ------------------------------------------------------------------------------------


def openai_messages(messages: list[Any]) -> list[dict[str, Any]]:
    """Ollama's messages in OpenAI's shape: tool calls get ids (``call_<m>_<k>``) and a tool
    result the id of the call it answers (by ``tool_name``, else the first unanswered one)."""
    out: list[dict[str, Any]] = []
    pending: list[tuple[str, str]] = []  # (id, name) of calls not answered yet
    for i, message in enumerate(messages):
        if not isinstance(message, dict):
            raise InvalidInput(f"messages[{i}] must be an object")
        if message.get("images"):
            raise InvalidInput(f"messages[{i}].images: images are not supported by this server")
        said: dict[str, Any] = {"role": message.get("role"), "content": message.get("content")}
        if message.get("role") == "assistant" and message.get("tool_calls"):
            calls = _calls(i, message["tool_calls"])
            said["tool_calls"] = calls
            pending = [(c["id"], c["function"]["name"]) for c in calls]
        if message.get("role") == "tool":
            name = message.get("tool_name") or message.get("name") or ""
            said["tool_call_id"] = _answered(pending, str(name), i)
            if name:
                said["name"] = name
        out.append(said)
    return out


def _calls(i: int, calls: Any) -> list[dict[str, Any]]:
    if not isinstance(calls, list):
        raise InvalidInput(f"messages[{i}].tool_calls must be a list")
    out = []
    for k, call in enumerate(calls):
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            raise InvalidInput(f"messages[{i}].tool_calls[{k}] needs a function with a name")
        arguments = function.get("arguments") or {}
        text = arguments if isinstance(arguments, str) else orjson.dumps(arguments).decode()
        call_id = call.get("id") or f"call_{i}_{k}"
        out.append({"id": call_id, "type": "function",
                    "function": {"name": function["name"], "arguments": text}})  # fmt: skip
    return out


def _answered(pending: list[tuple[str, str]], name: str, i: int) -> str:
    for at, (call_id, called) in enumerate(pending):
        if not name or called == name:
            del pending[at]
            return call_id
    return f"call_tool_{i}"
