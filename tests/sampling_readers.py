"""The sampling readers of every family, as the routes call them, and what "safe" means for what
they accept: the unit tests, the fuzz target and the integration test all read through these.

A reader takes what a client controls (a request's body, or its ``parameters`` object) and
returns the request's ``SamplingParams``, or raises InvalidInput (the family's 400).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch

from rosettaserve.core.generate import SEED_MAX, Fields, SamplingParams
from rosettaserve.core.sampling_fields import (
    GREEDY_BELOW,
    REPETITION_PENALTY_MIN,
    TOP_K_OFF,
    SamplingTable,
    read_sampling,
)
from rosettaserve.protocols.anthropic import schema as anthropic
from rosettaserve.protocols.mindie import rest as mindie
from rosettaserve.protocols.openai import responses_schema as responses
from rosettaserve.protocols.openai import schema as openai
from rosettaserve.protocols.tgi import schema as tgi
from rosettaserve.protocols.triton_generate import rest as triton
from rosettaserve.protocols.vllm import rest as vllm
from rosettaserve.runtimes.llm.model import OIP_SAMPLING, oip_sampling
from rosettaserve.runtimes.llm.sampling import TokenState, penalize, probabilities

MAX_N, MAX_STOP = 8, 4
Reader = Callable[[dict[str, Any]], SamplingParams]


def _chat(doc: dict[str, Any]) -> SamplingParams:
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], **doc}
    return openai.chat_request(body, MAX_N, MAX_STOP)[0].generate.sampling


def _completions(doc: dict[str, Any]) -> SamplingParams:
    body = {"model": "m", "prompt": "hi", **doc}
    return openai.completion_request(body, MAX_N, MAX_STOP).generate.sampling


def _tgi(doc: dict[str, Any]) -> SamplingParams:
    return tgi.tgi_request({"inputs": "hi", "parameters": doc}, MAX_STOP).generate.sampling


def _vllm(doc: dict[str, Any]) -> SamplingParams:
    return vllm.sampling(Fields({"prompt": "hi", **doc}), MAX_N, MAX_STOP)[0]


def _triton(doc: dict[str, Any]) -> SamplingParams:
    merged = triton.parameters({"text_input": "hi", **doc})
    return read_sampling(Fields(merged, "parameters"), triton.SAMPLING, MAX_STOP)


def _mindie(doc: dict[str, Any]) -> SamplingParams:
    return read_sampling(Fields(doc, "parameters"), mindie.SAMPLING, MAX_STOP)


def _responses(doc: dict[str, Any]) -> SamplingParams:
    body = {"model": "m", "input": "hi", **doc}
    return responses.responses_request(body, MAX_STOP).generate.sampling


def _anthropic(doc: dict[str, Any]) -> SamplingParams:
    body = {"model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}], **doc}
    return anthropic.messages_request(body, MAX_STOP).generate.sampling


def _oip(doc: dict[str, Any]) -> SamplingParams:
    return oip_sampling(Fields(doc, "parameters"))


READERS: dict[str, Reader] = {
    "openai-chat": _chat,
    "openai-completions": _completions,
    "tgi": _tgi,
    "vllm": _vllm,
    "triton": _triton,
    "mindie": _mindie,
    "openai-responses": _responses,
    "anthropic": _anthropic,
    "oip": _oip,
}
TABLES: dict[str, SamplingTable] = {
    "openai-chat": openai.SAMPLING,
    "openai-completions": openai.COMPLETIONS_SAMPLING,
    "tgi": tgi.SAMPLING,
    "vllm": vllm.SAMPLING,
    "triton": triton.SAMPLING,
    "mindie": mindie.SAMPLING,
    "openai-responses": responses.SAMPLING,
    "anthropic": anthropic.SAMPLING,
    "oip": OIP_SAMPLING,
}
# Numeric keys the routes read beside their sampling table.
OTHER_NUMBERS: dict[str, tuple[str, ...]] = {
    "openai-chat": ("n", "top_logprobs"),
    "openai-completions": ("n", "best_of", "logprobs"),
    "tgi": ("best_of", "top_n_tokens", "truncate"),
    "vllm": ("n", "best_of", "logprobs"),
}


def numeric_keys(family: str) -> list[str]:
    """Every numeric key the family's reader reads: its table's (fields and refused keys, under
    each of their names) and the route's own."""
    table = TABLES[family]
    keys = [k for f in table.fields if f.kind in ("int", "number") for k in f.keys]
    keys += [r.key for r in table.refused if r.kind in ("int", "number")]
    return keys + list(OTHER_NUMBERS.get(family, ()))


def assert_safe(params: SamplingParams) -> None:
    """What the engine needs of accepted parameters to sample a finite distribution."""
    t = params.temperature
    assert t == 0.0 or GREEDY_BELOW <= t <= 100.0, t
    if t == 0.0:
        assert (params.top_p, params.top_k) == (1.0, 0), params
    assert 0.0 < params.top_p <= 1.0, params.top_p
    assert 0 <= params.top_k < TOP_K_OFF, params.top_k
    assert REPETITION_PENALTY_MIN <= params.repetition_penalty <= 100.0, params
    assert -2.0 <= params.presence_penalty <= 2.0, params.presence_penalty
    assert -2.0 <= params.frequency_penalty <= 2.0, params.frequency_penalty
    assert params.seed is None or 0 <= params.seed <= SEED_MAX, params.seed
    assert all(map(math.isfinite, (t, params.top_p, params.repetition_penalty)))


def distribution(params: SamplingParams, row: torch.Tensor, seen: list[int]) -> torch.Tensor:
    """The probabilities the engine samples ``row`` with under ``params`` (``seen``: the prompt
    and output so far, which the penalties count); one-hot on the argmax when greedy."""
    state = TokenState.create(params, params.seed or 0, seen, row.shape[-1])
    for token in seen:
        state.record(token)
    penalized = penalize(row, state) if state.penalized else row
    if params.greedy:
        return torch.nn.functional.one_hot(penalized.argmax(), row.shape[-1]).float()
    return probabilities(penalized, state)


def assert_finite_distribution(probs: torch.Tensor) -> None:
    assert bool(torch.isfinite(probs).all()), probs
    assert bool((probs >= 0).all()), probs
    assert abs(float(probs.sum()) - 1.0) < 1e-3, float(probs.sum())
