"""vLLM's output objects as plain dataclasses with the fields our vLLM runtime reads, so the
runtime's stream and engine can be tested without vLLM installed (tests_vllm runs real vLLM)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass
class Sequence:  # vllm.outputs.CompletionOutput, as a delta
    index: int
    text: str
    token_ids: list[int]
    finish_reason: str | None = None
    stop_reason: int | str | None = None
    logprobs: Any = None


@dataclass
class Output:  # vllm.outputs.RequestOutput
    outputs: list[Sequence]
    prompt_logprobs: Any = None
