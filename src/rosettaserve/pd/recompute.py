"""Recompute (``retry:`` / ``is-recompute: true``): a preempted sequence's request, rebuilt.

A decode instance that gives a sequence up sends the request's own body back to the scheduler
with its text field replaced by ``"<prompt length>,<prompt ids...>,<output ids...>"`` and the
original value kept in ``origin_inputs`` (MindIE's recompute body). The text field is the
one the families' table names (protocols/families.py): ``inputs`` (TGI, MindIE native),
``prompt`` (vLLM, OpenAI completions), ``text_input`` (Triton generate) or, for OpenAI chat,
``messages`` (one user message holding the token string). A
sampled request also carries ``pd_sampler`` (its seed and sampler state), so a recomputed
sequence draws what it would have drawn. The prefill instance puts the original text back,
then prefills the prompt and the output so far and goes on from there.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from typing import Any

import orjson

from rosettaserve.core.errors import InvalidInput
from rosettaserve.core.generate import json_object
from rosettaserve.protocols import families

ORIGIN = "origin_inputs"
SAMPLER = "pd_sampler"
MAX_TOKENS = 1 << 20


def text_field(path: str, body: bytes | bytearray) -> str:
    """The prompt's field, as the families' table says (protocols/families.py)."""
    return families.text_field(path, body) or "inputs"


def retry_body(
    path: str,
    body: bytes,
    prompt_ids: list[int],
    output_ids: list[int],
    sampler: tuple[int, bytes | None] | None = None,
) -> bytes:
    doc = orjson.loads(body)
    key = text_field(path, body)
    original = "input_id" if key == "inputs" and "input_id" in doc else key
    tokens = ",".join(str(i) for i in [len(prompt_ids), *prompt_ids, *output_ids])
    doc[ORIGIN] = doc.pop(original, None)
    doc[key] = [{"role": "user", "content": tokens}] if key == "messages" else tokens
    if sampler is not None:
        seed, state = sampler
        doc[SAMPLER] = {"seed": seed, "state": base64.b64encode(state or b"").decode()}
    return orjson.dumps(doc)


@dataclass
class Recompute:
    prompt_ids: list[int]
    prior: list[int]  # output tokens generated before the preemption
    seed: int | None = None
    sampler_state: bytes | None = None


def restore(path: str, body: bytes | bytearray) -> tuple[bytes, Recompute]:
    """The original body (``origin_inputs`` put back) and what the token string says."""
    doc = json_object(body)
    key = text_field(path, body)
    value = doc.get(key)
    if key == "messages" and isinstance(value, list) and value and isinstance(value[-1], dict):
        value = value[-1].get("content")
    state = Recompute(*parse_tokens(value))
    if ORIGIN in doc:
        origin = doc.pop(ORIGIN)
        if key == "inputs" and isinstance(origin, list):
            del doc["inputs"]
            key = "input_id"
        doc[key] = origin
    sampler = doc.pop(SAMPLER, None)
    if sampler is not None:
        state.seed, state.sampler_state = _sampler(sampler)
    return orjson.dumps(doc), state


def parse_tokens(value: Any) -> tuple[list[int], list[int]]:
    if not isinstance(value, str):
        raise InvalidInput("a recompute request needs '<prompt length>,<token ids...>' as its text")
    try:
        numbers = [int(part) for part in value.split(",")]
    except ValueError:
        raise InvalidInput("a recompute token string holds comma-separated integers") from None
    if len(numbers) > MAX_TOKENS or any(n < 0 for n in numbers):
        raise InvalidInput("a recompute token string holds too many or negative numbers")
    count = numbers[0]
    if not 1 <= count <= len(numbers) - 1:
        raise InvalidInput(f"a recompute prompt length must be in [1, {len(numbers) - 1}]")
    return numbers[1 : 1 + count], numbers[1 + count :]


def _sampler(value: Any) -> tuple[int, bytes | None]:
    if not isinstance(value, dict) or not isinstance(value.get("seed"), int):
        raise InvalidInput(f"'{SAMPLER}' must be {{'seed': int, 'state': base64}}")
    try:
        state = base64.b64decode(value.get("state") or "", validate=True)
    except ValueError:
        raise InvalidInput(f"'{SAMPLER}.state' must be base64") from None
    return int(value["seed"]), state or None
