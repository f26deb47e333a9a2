"""GenerateDelta / Completion -> OpenAI chat.completion(.chunk), text_completion, errors."""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from typing import Any

import orjson

from rosettaserve.core.errors import ModelNotFound, ServingError, Unauthenticated
from rosettaserve.core.generate import (
    Completion,
    FinishReason,
    GenerateDelta,
    PromptLogprobs,
    TokenLogprob,
    Usage,
)

DONE = b"data: [DONE]\n\n"
ERROR_TYPES = {400: "invalid_request_error", 404: "invalid_request_error", 429: "rate_limit_error"}
FINISH = {FinishReason.LENGTH: "length", FinishReason.EOS: "stop", FinishReason.STOP: "stop"}


@dataclass
class Reply:
    """What every object of one response shares."""

    kind: str  # "chat" or "text"
    model: str
    id: str = ""
    created: int = 0

    def __post_init__(self) -> None:
        if not self.id:
            self.id = f"{'chatcmpl' if self.kind == 'chat' else 'cmpl'}-{uuid.uuid4().hex}"
        self.created = self.created or int(time.time())

    def head(self, object_type: str) -> dict[str, Any]:
        return {"id": self.id, "object": object_type, "created": self.created, "model": self.model}


def sse(doc: Any) -> bytes:
    return b"data: " + orjson.dumps(doc) + b"\n\n"


def usage(u: Usage) -> dict[str, int]:
    return {
        "prompt_tokens": u.prompt_tokens,
        "completion_tokens": u.completion_tokens,
        "total_tokens": u.total_tokens,
    }


def finish(reason: FinishReason | None) -> str | None:
    return None if reason is None else FINISH[reason]


def prompt_logprobs(completions: list[Completion]) -> list[Any] | None:
    """vLLM's ``prompt_logprobs``: per prompt token, ``{token id: {logprob, rank,
    decoded_token}}`` for the token and its top alternatives (null for the first token); None
    when they were not asked."""
    found: PromptLogprobs | None = next(
        (c.prompt_logprobs for c in completions if c.prompt_logprobs is not None), None
    )
    if found is None:
        return None
    return [
        None
        if place is None
        else {
            str(x.token_id): {"logprob": x.logprob, "rank": x.rank, "decoded_token": x.token}
            for x in place
        }
        for place in found
    ]


# -- chat ---------------------------------------------------------------------------------------


def chat_logprobs(items: list[TokenLogprob]) -> dict[str, Any]:
    return {
        "content": [
            {
                "token": t.token,
                "logprob": t.logprob,
                "bytes": list(t.token.encode("utf-8")),
                "top_logprobs": [
                    {"token": a.token, "logprob": a.logprob, "bytes": list(a.token.encode("utf-8"))}
                    for a in t.top
                ],
            }
            for t in items
        ]
    }


def chat_completion(
    reply: Reply, completions: list[Completion], total: Usage, logprobs: bool
) -> dict[str, Any]:
    choices = [
        {
            "index": c.index,
            "message": {"role": "assistant", "content": c.text},
            "logprobs": chat_logprobs(c.logprobs) if logprobs else None,
            "finish_reason": finish(c.finish_reason),
            "stop_reason": c.stop_reason,
        }
        for c in completions
    ]
    doc = {**reply.head("chat.completion"), "choices": choices, "usage": usage(total)}
    prompt = prompt_logprobs(completions)
    if prompt is not None:  # vLLM's, beside the choices
        doc["prompt_logprobs"] = prompt
    return doc


def chat_chunk(reply: Reply, choices: list[dict[str, Any]], include_usage: bool) -> bytes:
    doc = {**reply.head("chat.completion.chunk"), "choices": choices}
    if include_usage:
        doc["usage"] = None
    return sse(doc)


def chat_role_choice(index: int) -> dict[str, Any]:
    return {
        "index": index,
        "delta": {"role": "assistant", "content": ""},
        "logprobs": None,
        "finish_reason": None,
    }


def chat_delta_choice(delta: GenerateDelta, logprobs: bool) -> dict[str, Any]:
    body = {"content": delta.text} if delta.text or delta.finish_reason is None else {}
    choice: dict[str, Any] = {
        "index": delta.index,
        "delta": body,
        "logprobs": chat_logprobs(delta.logprobs or []) if logprobs else None,
        "finish_reason": finish(delta.finish_reason),
    }
    if delta.finish_reason is not None:
        choice["stop_reason"] = delta.stop_reason
    return choice


def usage_chunk(reply: Reply, object_type: str, total: Usage) -> bytes:
    return sse({**reply.head(object_type), "choices": [], "usage": usage(total)})


# -- completions --------------------------------------------------------------------------------


def text_logprobs(items: list[TokenLogprob], offset: int) -> dict[str, Any]:
    offsets = []
    for t in items:
        offsets.append(offset)
        offset += len(t.token)
    return {
        "tokens": [t.token for t in items],
        "token_logprobs": [t.logprob for t in items],
        "top_logprobs": [{a.token: a.logprob for a in t.top} for t in items],
        "text_offset": offsets,
    }


def text_completion(
    reply: Reply, completions: list[Completion], total: Usage, logprobs: bool, echo: str
) -> dict[str, Any]:
    prompt = prompt_logprobs(completions)
    choices = [
        {
            "index": c.index,
            "text": echo + c.text,
            "logprobs": text_logprobs(c.logprobs, len(echo)) if logprobs else None,
            "finish_reason": finish(c.finish_reason),
            "stop_reason": c.stop_reason,
        }
        | ({} if prompt is None else {"prompt_logprobs": prompt})  # vLLM's, in each choice
        for c in completions
    ]
    return {**reply.head("text_completion"), "choices": choices, "usage": usage(total)}


def text_chunk(
    reply: Reply,
    delta: GenerateDelta,
    logprobs: bool,
    *,
    prefix: str,
    offset: int,
    include_usage: bool,
) -> bytes:
    choice: dict[str, Any] = {
        "index": delta.index,
        "text": prefix + delta.text,
        "logprobs": text_logprobs(delta.logprobs or [], offset) if logprobs else None,
        "finish_reason": finish(delta.finish_reason),
    }
    if delta.finish_reason is not None:
        choice["stop_reason"] = delta.stop_reason
    doc = {**reply.head("text_completion"), "choices": [choice]}
    if include_usage:
        doc["usage"] = None
    return sse(doc)


# -- models and errors --------------------------------------------------------------------------


def model_card(name: str, created: int, max_model_len: int) -> dict[str, Any]:
    return {
        "id": name,
        "object": "model",
        "created": created,
        "owned_by": "rosettaserve",
        "root": name,
        "parent": None,
        "max_model_len": max_model_len,
    }


def error_doc(exc: ServingError) -> dict[str, Any]:
    status = exc.http_status
    kind = ERROR_TYPES.get(status, "server_error" if status >= 500 else "invalid_request_error")
    code = "model_not_found" if isinstance(exc, ModelNotFound) else None
    if isinstance(exc, Unauthenticated):
        code = "invalid_api_key"  # OpenAI's own code for a missing or wrong key
    return {"error": {"message": exc.message, "type": kind, "param": None, "code": code}}
