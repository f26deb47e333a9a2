"""The sampling readers of every LLM family and of OIP's parameters (core/sampling_fields.py,
through the routes' own functions: tests/sampling_readers.py), then the engine's sampler.

The input is ``family\\n<body>``: the family's name (another first line picks a family by its
length) and a JSON body as that family's route reads it (OIP's parameters object with the
NaN and Infinity tokens its REST reader takes). Properties: only the project's errors (4xx)
escape reading; parameters read are within what the engine can sample (``assert_safe``), give
a finite distribution on a random logits row, and, sampled in one batch beside a greedy and a
seeded neighbour, fail no row and leave the neighbours' tokens what they are alone.
"""

from __future__ import annotations

import zlib
from typing import Any

import torch

from rosettaserve.core.errors import InvalidInput
from rosettaserve.core.generate import SamplingParams, json_object
from rosettaserve.protocols.oip.convert import parse_json
from rosettaserve.runtimes.llm.sampling import TokenState, choose
from tests.fuzz.targets.refusals import assert_a_refusal
from tests.sampling_readers import (
    READERS,
    assert_finite_distribution,
    assert_safe,
    distribution,
)

VOCAB = 32
PROMPT = [3, 5, 7]  # the tokens the penalties count
NAMES = list(READERS)


def family_and_doc(data: bytes) -> tuple[str, Any]:
    first, _, body = data.partition(b"\n")
    name = first.decode("latin-1")
    family = name if name in READERS else NAMES[len(first) % len(NAMES)]
    try:
        doc = parse_json(body) if family == "oip" else json_object(body)
    except InvalidInput:
        return family, None
    return family, doc


def read(family: str, doc: Any) -> SamplingParams | None:
    if not isinstance(doc, dict):
        return None
    try:
        return READERS[family](doc)
    except Exception as exc:
        assert_a_refusal(exc)
        return None


def neighbours() -> list[TokenState]:
    greedy = TokenState.create(SamplingParams(temperature=0.0), 0, PROMPT, VOCAB)
    seeded = TokenState.create(SamplingParams(temperature=0.8, seed=9), 9, PROMPT, VOCAB)
    return [greedy, seeded]


def check(data: bytes) -> None:
    family, doc = family_and_doc(data)
    params = read(family, doc)
    if params is None:
        return
    assert_safe(params)
    crc = zlib.crc32(data)
    scale = 10.0 ** (crc % 4)  # logits from about 1 to about 1e3 apart
    logits = torch.randn(3, VOCAB, generator=torch.Generator().manual_seed(crc)) * scale
    assert_finite_distribution(distribution(params, logits[2], PROMPT))
    attacker = TokenState.create(params, params.seed or 0, PROMPT, VOCAB)
    tokens, failed = choose(logits, [*neighbours(), attacker])
    assert not failed, failed
    alone = [choose(logits[i : i + 1], [state])[0][0] for i, state in enumerate(neighbours())]
    assert tokens[:2] == alone, (tokens, alone)
