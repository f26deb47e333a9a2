"""The LLM hub: a GenerateRequest in, a stream of GenerateDelta out.

Every LLM API family (OpenAI, TGI, vLLM, Triton generate, MindIE) converts its wire request to a
``GenerateRequest`` and formats the ``GenerateDelta`` stream back; an engine (``TextGenerator``)
sits behind, reached through the generation plane (generation_plane.py). Nothing here knows a
wire format.
"""

from __future__ import annotations

import math
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Protocol, runtime_checkable

import orjson

from rosettaserve.core.errors import InvalidInput
from rosettaserve.core.structured_output import OutputConstraint


class FinishReason(Enum):
    LENGTH = "length"  # max new tokens or the context window
    EOS = "eos_token"  # the model's end-of-sequence token
    STOP = "stop_sequence"  # a stop string or a stop token id


@dataclass(slots=True)
class SamplingParams:
    max_new_tokens: int | None = None  # asked for: more than the context window holds is an error
    default_max_new_tokens: int | None = None  # when not asked for (None: the window's room)
    temperature: float = 1.0  # 0: greedy
    top_p: float = 1.0
    top_k: int = 0  # 0: off
    seed: int | None = None
    repetition_penalty: float = 1.0  # > 1 discourages tokens of the prompt and the output
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    stop: tuple[str, ...] = ()
    stop_token_ids: tuple[int, ...] = ()
    include_stop_str_in_output: bool = False
    ignore_eos: bool = False
    logprobs: bool = False
    top_logprobs: int = 0
    skip_special_tokens: bool = True
    prompt_logprobs: int | None = None  # each prompt token's logprob and top k (vLLM's); None: off
    constraint: OutputConstraint | None = None  # what the output must match (None: anything)

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0


@dataclass(slots=True)
class GenerateRequest:
    prompt: str | None = None
    prompt_token_ids: list[int] | None = None  # wins over ``prompt`` when both are set
    sampling: SamplingParams = field(default_factory=SamplingParams)
    n: int = 1
    stream: bool = False
    request_id: str = ""
    add_special_tokens: bool = True  # False for text a chat template made (it has them)
    priority: int | None = None  # vLLM's field (core/share.py); None: the header's, or 0


@dataclass(frozen=True, slots=True)
class ChatTemplate:
    """How a conversation becomes a prompt beyond its messages: the variables the template is
    rendered with (``add_generation_prompt``, ``continue_final_message``, ``documents``, a
    request's ``chat_template_kwargs``), a template of the request's own (None: the
    model's) and the tools it offers (in OpenAI's shape, as templates take them; None: none)."""

    variables: Mapping[str, Any] = field(default_factory=lambda: {"add_generation_prompt": True})
    template: str | None = None
    tools: tuple[Mapping[str, Any], ...] | None = None


@dataclass(frozen=True, slots=True)
class TopLogprob:
    token_id: int
    token: str
    logprob: float


@dataclass(frozen=True, slots=True)
class TokenLogprob:
    token_id: int
    token: str
    logprob: float
    top: tuple[TopLogprob, ...] = ()


@dataclass(frozen=True, slots=True)
class RankedLogprob:
    """A prompt token's log-probability, or one of the top alternatives at its place."""

    token_id: int
    token: str
    logprob: float
    rank: int  # 1: the most likely token at that place


# per prompt token: its own logprob and the top alternatives (None for the first, which has no
# context to be predicted from), as vLLM's ``prompt_logprobs``
PromptLogprobs = list[tuple[RankedLogprob, ...] | None]


@dataclass(frozen=True, slots=True)
class Usage:
    prompt_tokens: int
    completion_tokens: int

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


@dataclass(slots=True)
class GenerateDelta:
    """What one sequence (``index`` of ``n``) produced in one engine step."""

    index: int
    text: str  # complete characters only; may be "" while a character or stop string is open
    token_ids: list[int]
    special: list[bool] = field(default_factory=list)
    logprobs: list[TokenLogprob] | None = None
    finish_reason: FinishReason | None = None
    stop_reason: str | int | None = None  # the stop string or stop token id that ended it
    usage: Usage | None = None  # on the last delta of a sequence
    seed: int | None = None  # the sampling seed used (on the last delta)
    prompt_logprobs: PromptLogprobs | None = None  # on a first delta, when asked


@dataclass(slots=True)
class Completion:
    """One sequence's deltas gathered: what non-streaming replies are made of."""

    index: int
    text: str = ""
    token_ids: list[int] = field(default_factory=list)
    special: list[bool] = field(default_factory=list)
    token_texts: list[str] = field(default_factory=list)
    logprobs: list[TokenLogprob] = field(default_factory=list)
    finish_reason: FinishReason | None = None
    stop_reason: str | int | None = None
    usage: Usage | None = None
    seed: int | None = None
    prompt_logprobs: PromptLogprobs | None = None

    def add(self, delta: GenerateDelta) -> None:
        if delta.prompt_logprobs is not None:
            self.prompt_logprobs = delta.prompt_logprobs
        self.text += delta.text
        self.token_ids += delta.token_ids
        self.special += delta.special
        # per-token text: the delta's text goes with its last token (a delta has one token)
        self.token_texts += [""] * (len(delta.token_ids) - 1) + [delta.text]
        if delta.logprobs:
            self.logprobs += delta.logprobs
        if delta.finish_reason is not None:
            self.finish_reason, self.stop_reason = delta.finish_reason, delta.stop_reason
            self.usage, self.seed = delta.usage, delta.seed


async def collect(stream: AsyncIterator[GenerateDelta], n: int = 1) -> list[Completion]:
    completions = [Completion(i) for i in range(n)]
    async for delta in stream:
        completions[delta.index].add(delta)
    return completions


def total_usage(completions: Sequence[Completion]) -> Usage:
    prompt = next((c.usage.prompt_tokens for c in completions if c.usage), 0)
    return Usage(prompt, sum(c.usage.completion_tokens for c in completions if c.usage))


@dataclass(frozen=True, slots=True)
class GeneratorInfo:
    model_id: str
    max_model_len: int  # prompt + generated tokens
    max_n: int
    max_num_seqs: int
    max_waiting: int
    max_stop_sequences: int
    dtype: str
    device: str
    special_ids: frozenset[int] = frozenset()
    created: int = 0  # unix time the model was loaded
    options: Mapping[str, Any] = field(default_factory=dict)  # the model's parameters
    prompt_logprobs: bool = False  # whether the engine computes a prompt's logprobs
    # a text prompt longer than this cannot fit the window, whatever its tokens (0: no bound
    # is known for the tokenizer; runtimes/llm/prompt_bound.py)
    max_prompt_chars: int = 0

    def check_prompt_chars(self, text: str) -> None:
        """InvalidInput for a text prompt too long to fit the window, before it is tokenized."""
        if self.max_prompt_chars and len(text) > self.max_prompt_chars:
            raise InvalidInput(
                f"the prompt has {len(text)} characters; this model's context window of "
                f"{self.max_model_len} tokens holds at most {self.max_prompt_chars} characters "
                "of text in this tokenizer's tokens (prompt and output together)"
            )


class DeltaStream(Protocol):
    """An async iterator of deltas; ``cancel`` (or leaving the iteration) stops the work."""

    def __aiter__(self) -> AsyncIterator[GenerateDelta]: ...

    async def __anext__(self) -> GenerateDelta: ...

    def cancel(self) -> None: ...


@runtime_checkable
class TextGenerator(Protocol):
    """The engine client every LLM family talks to (never tensors)."""

    @property
    def info(self) -> GeneratorInfo: ...

    def generate(self, request: GenerateRequest) -> DeltaStream:
        """Validate and enqueue; raises InvalidInput / Overloaded before anything is generated."""
        ...

    def chat_prompt(
        self, messages: list[dict[str, Any]], chat: ChatTemplate | None = None
    ) -> str: ...

    def tokenize(self, text: str, special: bool = True) -> list[int]:
        """``text``'s token ids (``special``: with the tokenizer's special tokens added)."""
        ...

    def decode(self, token_ids: list[int]) -> str: ...


def json_object(body: bytes | bytearray) -> dict[str, Any]:
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise InvalidInput(f"malformed JSON in the request body: {exc}") from None
    if not isinstance(doc, dict):
        raise InvalidInput("the request body must be a JSON object")
    return doc


class Fields:
    """Typed, range-checked reads of a JSON object's fields; errors are InvalidInput."""

    def __init__(self, doc: Mapping[str, Any], where: str = "") -> None:
        self.doc = doc
        self.where = where

    def _name(self, key: str) -> str:
        return f"{self.where}.{key}" if self.where else key

    def has(self, key: str) -> bool:
        return self.doc.get(key) is not None

    def integer(self, key: str, default: int | None, lo: int, hi: int | None = None) -> int | None:
        value = self.doc.get(key)
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, int | float) or not _whole(value):
            raise InvalidInput(f"'{self._name(key)}' must be an integer, got {value!r}")
        value = int(value)
        if value < lo or (hi is not None and value > hi):
            bound = f"in [{lo}, {hi}]" if hi is not None else f">= {lo}"
            raise InvalidInput(f"'{self._name(key)}' must be {bound}, got {value}")
        return value

    def number(
        self,
        key: str,
        default: float | None,
        lo: float,
        hi: float,
        lo_open: bool = False,
    ) -> float | None:
        value = self.doc.get(key)
        if value is None:
            return default
        number = _finite(value)
        if number is None:  # NaN and the infinities too (OIP's parameters may spell them)
            raise InvalidInput(f"'{self._name(key)}' must be a finite number, got {value!r}")
        if number < lo or number > hi or (lo_open and number == lo):
            bound = f"{'(' if lo_open else '['}{lo}, {hi}]"
            raise InvalidInput(f"'{self._name(key)}' must be in {bound}, got {value}")
        return number

    def boolean(self, key: str, default: bool) -> bool:
        value = self.doc.get(key)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise InvalidInput(f"'{self._name(key)}' must be a boolean, got {value!r}")
        return value

    def string(self, key: str, default: str | None = None) -> str | None:
        value = self.doc.get(key)
        if value is None:
            return default
        if not isinstance(value, str):
            raise InvalidInput(f"'{self._name(key)}' must be a string, got {value!r}")
        return value

    def strings(self, key: str, max_items: int) -> tuple[str, ...]:
        """A string or a list of strings (``stop``)."""
        value = self.doc.get(key)
        if value is None:
            return ()
        items = [value] if isinstance(value, str) else value
        if not isinstance(items, list) or not all(isinstance(s, str) and s for s in items):
            raise InvalidInput(f"'{self._name(key)}' must be a non-empty string or a list of them")
        if len(items) > max_items:
            raise InvalidInput(f"'{self._name(key)}' has {len(items)} items; at most {max_items}")
        return tuple(items)

    def token_ids(self, key: str) -> tuple[int, ...]:
        value = self.doc.get(key)
        if value is None:
            return ()
        if not isinstance(value, list) or not all(
            isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in value
        ):
            raise InvalidInput(f"'{self._name(key)}' must be a list of token ids (integers >= 0)")
        return tuple(value)

    def object(self, key: str) -> Fields:
        value = self.doc.get(key)
        if value is None:
            return Fields({}, self._name(key))
        if not isinstance(value, dict):
            raise InvalidInput(f"'{self._name(key)}' must be an object, got {value!r}")
        return Fields(value, self._name(key))


def _whole(value: int | float) -> bool:
    """An integer, or a float holding one (not NaN or an infinity)."""
    return isinstance(value, int) or (math.isfinite(value) and value == int(value))


def _finite(value: Any) -> float | None:
    """``value`` as a finite float; None if it is not a number or has no finite float."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        number = float(value)
    except OverflowError:  # an integer beyond float64's range
        return None
    return number if math.isfinite(number) else None


SEED_MAX = 2**63 - 1
