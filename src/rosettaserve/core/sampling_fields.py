"""One reader of sampling parameters for every LLM API family, driven by a table per family.

A family's ``SamplingTable`` is data: which wire key (or keys) fills which ``SamplingParams``
field, its type and range, the keys refused unless they hold their neutral value, the defaults,
and how the family tells greedy decoding from sampling. ``read_sampling`` applies a table to a
JSON object; errors are InvalidInput naming the wire key.

Every value it lets through gives the engine a finite distribution to sample from, whatever
the family: NaN and the infinities are refused, a temperature below ``GREEDY_BELOW`` decodes
greedily (as vLLM does), and the values the engine's float32 arithmetic cannot hold are brought
into its range (``engine_safe``). One request's values can never make a batch's step fail.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from rosettaserve.core.errors import InvalidInput
from rosettaserve.core.generate import SEED_MAX, Fields, SamplingParams


@dataclass(frozen=True, slots=True)
class Field:
    """``target`` (a SamplingParams attribute) from the first of ``keys`` that is present."""

    target: str
    keys: tuple[str, ...]
    kind: str  # "int", "number", "bool", "strings", "token_ids"
    lo: float = 0.0
    hi: float | None = None
    lo_open: bool = False


@dataclass(frozen=True, slots=True)
class Refused:
    """A key the engine cannot honour: accepted only when absent or equal to ``neutral``."""

    key: str
    kind: str
    neutral: Any
    lo: float = 0.0
    hi: float | None = None
    lo_open: bool = False


@dataclass(frozen=True, slots=True)
class SamplingTable:
    fields: tuple[Field, ...]
    refused: tuple[Refused, ...] = ()
    max_tokens: int | None = None  # the output limit when none is asked (as if asked)
    default_max_new_tokens: int | None = None  # the same, capped by the context window's room
    sample_rule: str = "temperature"  # or "do_sample": TGI's (sample when asked or warped)
    default_temperature: float = 1.0  # when none is given (under the "temperature" rule)
    fixed: Mapping[str, Any] = field(default_factory=dict)  # SamplingParams set by the family


# A temperature below this decodes greedily, in every family (vLLM's _SAMPLING_EPS).
GREEDY_BELOW = 1e-5
# The smallest repetition penalty the engine applies (a smaller one is raised to it): a seen
# token's positive logit is divided by the penalty in float32, which holds it up to ~3.4e38, and
# below ~1.4e-45 the penalty itself is 0 there. At this one, logits up to 3.4e8 stay finite; any
# penalty this small already puts every seen token with a positive logit first.
REPETITION_PENALTY_MIN = 1e-30
# top_k at or beyond this keeps every token (no vocabulary is that large): off, as 0 is, so no
# engine stores an integer beyond its int32 range.
TOP_K_OFF = 2**31 - 1


def read(f: Fields, key: str, spec: Field | Refused, max_stop: int) -> Any:
    """The value of ``key`` typed and range-checked as ``spec`` says (None: absent)."""
    kind, lo, hi = spec.kind, spec.lo, spec.hi
    if not f.has(key):
        return None
    if kind == "int":
        return f.integer(key, None, int(lo), None if hi is None else int(hi))
    if kind == "number":
        return f.number(key, None, lo, float("inf") if hi is None else hi, spec.lo_open)
    if kind == "bool":
        return f.boolean(key, False)
    if kind == "token_ids":
        return f.token_ids(key)
    if kind == "strings":
        return f.strings(key, max_stop)
    raise ValueError(f"unknown sampling field kind {kind!r}")


def read_sampling(f: Fields, table: SamplingTable, max_stop: int) -> SamplingParams:
    """The family's sampling parameters in ``f`` (a request body or its parameters object)."""
    for r in table.refused:
        value = read(f, r.key, r, max_stop)
        if value is not None and value != r.neutral:
            raise InvalidInput(f"'{f._name(r.key)}' is not supported by this server")
    found: dict[str, Any] = {}
    for spec in table.fields:
        for key in spec.keys:
            found_value = read(f, key, spec, max_stop)
            if found_value is not None:
                found[spec.target] = found_value
                break
    params = SamplingParams(default_max_new_tokens=table.default_max_new_tokens)
    for name, value in {**found, **table.fixed}.items():
        setattr(params, name, tuple(value) if isinstance(value, list | tuple) else value)
    if params.max_new_tokens is None:
        params.max_new_tokens = table.max_tokens
    params.temperature = _temperature(f, table, found)
    return engine_safe(params)


def _temperature(f: Fields, table: SamplingTable, found: dict[str, Any]) -> float:
    temperature: float | None = found.get("temperature")
    if table.sample_rule == "do_sample":
        warped = (
            temperature not in (None, 1.0)
            or found.get("top_k") is not None
            or found.get("top_p", 1.0) < 1.0
        )
        return (temperature or 1.0) if f.boolean("do_sample", False) or warped else 0.0
    return table.default_temperature if temperature is None else temperature


def engine_safe(params: SamplingParams) -> SamplingParams:
    """``params`` with the values every engine can sample with (O(1), once per request): a
    temperature below ``GREEDY_BELOW`` is greedy, and greedy decoding ignores top-k and top-p
    (vLLM resets them too); top_k -1, 0 or beyond ``TOP_K_OFF`` is off; a repetition penalty
    below ``REPETITION_PENALTY_MIN`` is raised to it."""
    if params.temperature < GREEDY_BELOW:
        params.temperature, params.top_p, params.top_k = 0.0, 1.0, 0
    if params.top_k < 0 or params.top_k >= TOP_K_OFF:
        params.top_k = 0  # -1 and 0 both mean off (vLLM)
    params.repetition_penalty = max(params.repetition_penalty, REPETITION_PENALTY_MIN)
    return params


# The fields most families share, with OpenAI's and vLLM's ranges.
PENALTIES = (
    Field("seed", ("seed",), "int", 0, SEED_MAX),
    Field("repetition_penalty", ("repetition_penalty",), "number", 0.0, 100.0, lo_open=True),
    Field("presence_penalty", ("presence_penalty",), "number", -2.0, 2.0),
    Field("frequency_penalty", ("frequency_penalty",), "number", -2.0, 2.0),
)
# vLLM's sampling extras the engine does not build: a 400 unless neutral, in every family
# that takes vLLM's fields (its simple API and its OpenAI server)
NOT_BUILT_EXTRAS = (Refused("min_p", "number", 0.0, 0.0, 1.0), Refused("min_tokens", "int", 0))
STOPS = (
    Field("stop", ("stop",), "strings"),
    Field("stop_token_ids", ("stop_token_ids",), "token_ids"),
    Field("include_stop_str_in_output", ("include_stop_str_in_output",), "bool"),
    Field("ignore_eos", ("ignore_eos",), "bool"),
    Field("skip_special_tokens", ("skip_special_tokens",), "bool"),
)


def refuse_unspaced_special_tokens(f: Fields, params: SamplingParams) -> None:
    """vLLM's ``spaces_between_special_tokens`` (true by default) changes the text only where
    special tokens are kept in it (``skip_special_tokens: false``); false there is not built."""
    if not f.boolean("spaces_between_special_tokens", True) and not params.skip_special_tokens:
        raise InvalidInput(
            f"'{f._name('spaces_between_special_tokens')}': false with special tokens kept is "
            "not supported by this server"
        )
