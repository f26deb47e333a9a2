"""A request's prompt as token ids and its room for output, checked alike by every engine."""

from __future__ import annotations

from collections.abc import Callable

from rosettaserve.core.errors import InvalidInput
from rosettaserve.core.generate import GenerateRequest, GeneratorInfo, SamplingParams


def prompt_ids(
    request: GenerateRequest,
    vocab: int,
    info: GeneratorInfo,
    tokenize: Callable[[str, bool], list[int]],
) -> list[int]:
    """The request's token ids (given, or ``tokenize``d from its text): each in the vocabulary,
    at least one, and fewer than the context window (which holds prompt and output together).
    A text too long to fit is refused before it is tokenized (``info.check_prompt_chars``)."""
    context = info.max_model_len
    if request.prompt_token_ids is not None:
        ids = request.prompt_token_ids
        _check_fits(len(ids), context)
        bad = [i for i in ids if not 0 <= i < vocab]
        if bad:
            raise InvalidInput(f"token id {bad[0]} is out of range [0, {vocab})")
        ids = list(ids)
    else:
        text = request.prompt or ""
        info.check_prompt_chars(text)
        ids = tokenize(text, request.add_special_tokens)
    if not ids:
        raise InvalidInput("the prompt is empty")
    _check_fits(len(ids), context)
    return ids


def _check_fits(tokens: int, context: int) -> None:
    if tokens >= context:
        raise InvalidInput(
            f"the prompt has {tokens} tokens; this model's context window is "
            f"{context} tokens (prompt and output together)"
        )


def max_new_tokens(params: SamplingParams, prompt_len: int, context: int) -> int:
    """The tokens a request may generate: what it asks (or its family's default), within the
    room its prompt leaves in the ``context`` window; asking for more is the client's error."""
    room = context - prompt_len
    if params.max_new_tokens is None:
        return min(params.default_max_new_tokens or room, room)
    if params.max_new_tokens > room:
        raise InvalidInput(
            f"this model's context window is {context} tokens; the prompt "
            f"has {prompt_len}, so at most {room} new tokens fit, not {params.max_new_tokens}"
        )
    return params.max_new_tokens
