"""Starting a sequence somewhere else than at its prompt, and giving one up.

What prefill/decode disaggregation needs from the engine, in engine terms (no wire format):
  - ``Resume.handoff``: prefill only: choose the next token, then hand the KV cache over here
    instead of decoding on (a prefill instance);
  - ``Resume.kv``: start from a cache computed elsewhere (a decode instance): no prefill;
  - ``Resume.prior``: output tokens produced before (on another instance, or before a
    preemption): they are replayed through the sequence's text and sampling state, so its next
    tokens and their text are exactly what one uninterrupted run would give;
  - ``Preempted``: a preemptible sequence dropped because the KV budget ran out; the consumer
    receives it as an error carrying what is needed to recompute the sequence elsewhere.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from rosettaserve.core.errors import ServingError
from rosettaserve.core.status import ErrorKind
from rosettaserve.runtimes.llm.batch import KV


@dataclass
class Handoff:
    """Filled by the engine thread before the chosen token's delta is delivered."""

    kv: KV | None = None  # the cache of prompt + prior tokens (every token before the new one)
    seed: int = 0
    sampler_state: bytes | None = None  # the sequence's torch.Generator state after the draw


@dataclass
class Resume:
    prior: list[int] = field(default_factory=list)
    kv: KV | None = None  # covers prompt + prior[:-1]; prior[-1] is fed at the next step
    seed: int | None = None
    sampler_state: bytes | None = None
    emit_prior: bool = False  # send the prior tokens' deltas again (with logprobs if asked)
    handoff: Handoff | None = None
    preemptible: bool = False


class Preempted(ServingError):
    """The KV budget ran out: this sequence was dropped to let the others go on."""

    kind = ErrorKind.UNAVAILABLE

    def __init__(
        self,
        prompt_ids: list[int],
        output_ids: list[int],
        seed: int = 0,
        sampler_state: bytes | None = None,
    ) -> None:
        super().__init__("the sequence was preempted: the decode instance's KV budget ran out")
        self.prompt_ids = list(prompt_ids)
        self.output_ids = list(output_ids)
        self.seed = seed
        self.sampler_state = sampler_state  # None: greedy


def generator_state(generator: torch.Generator | None) -> bytes | None:
    return None if generator is None else bytes(generator.get_state().numpy().tobytes())


def set_generator_state(generator: torch.Generator | None, state: bytes | None) -> None:
    if generator is None or state is None:
        return
    current = generator.get_state()
    if len(state) != current.numel():
        raise ValueError(f"a sampler state has {current.numel()} bytes, not {len(state)}")
    generator.set_state(torch.frombuffer(bytearray(state), dtype=torch.uint8))


def kv_usage(prompt_len: int, output_len: int) -> int:
    """KV cache tokens a sequence holds after its next decode step."""
    return prompt_len + output_len


def victims(usages: list[int], preemptible: list[bool], budget: int) -> list[int]:
    """Rows to drop, newest first, until the rest fit ``budget`` (one sequence always stays)."""
    total, chosen = sum(usages), list[int]()
    for row in reversed(range(len(usages))):
        if total <= budget or len(usages) - len(chosen) <= 1:
            break
        if preemptible[row]:
            chosen.append(row)
            total -= usages[row]
    return chosen
