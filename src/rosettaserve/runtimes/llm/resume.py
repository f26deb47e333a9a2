"""Starting a sequence somewhere else than at its prompt, and giving one up.

What prefill/decode disaggregation needs from the engine, in engine terms (no wire format; the
names are core/pd_engine.py's, where the roles meet the engines):
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

import torch

from rosettaserve.core.pd_engine import Handoff, Preempted, Resume

__all__ = [
    "Handoff",
    "Preempted",
    "Resume",
    "generator_state",
    "kv_usage",
    "set_generator_state",
    "victims",
]


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
