"""What the engine keeps: its configuration and counters, its sequences and their groups."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from rosettaserve.core.generate import SamplingParams
from rosettaserve.core.share import DEFAULT, Share
from rosettaserve.runtimes.llm.detok import IncrementalDetokenizer, StopText
from rosettaserve.runtimes.llm.grammar import Matcher
from rosettaserve.runtimes.llm.resume import Resume, kv_usage
from rosettaserve.runtimes.llm.sampling import TokenState
from rosettaserve.runtimes.llm.stream import GenerationStream


@dataclass(frozen=True)
class EngineConfig:
    model_id: str
    max_model_len: int
    max_num_seqs: int = 32
    max_waiting: int = 64
    max_n: int = 8
    max_stop_sequences: int = 8
    # prompt tokens (padding included) prefilled per iteration while streams decode: what one
    # step of theirs may wait for (bench/pd_bench.py: with 480-token prompts arriving, ITL p99
    # 1.1-1.3x of without at 96, 1.7-2.0x at 256; long prompts' TTFT ~1.8x longer at 96)
    prefill_chunk_tokens: int = 96
    kv_budget_tokens: int = 0  # KV cache tokens of the running sequences (0: no limit)
    prefix_cache_tokens: int = 4096  # prompt tokens whose KV the prefix cache keeps (0: off)
    prefix_block_tokens: int = 16  # the prefix cache's block: prefixes are reused by whole blocks
    options: Mapping[str, Any] = field(default_factory=dict)  # model.yaml parameters


@dataclass
class EngineStats:
    """Counters of the engine thread (read anywhere; written only by that thread)."""

    prefills: int = 0  # prompts prefilled (all their chunks)
    prefill_steps: int = 0  # prefill forward passes
    prefill_tokens: int = 0  # prompt tokens computed (not counting prefix cache hits)
    prefix_hit_tokens: int = 0  # prompt tokens taken from the prefix cache
    decode_steps: int = 0
    peak_batch: int = 0  # most sequences decoded in one step
    tokens: int = 0  # tokens generated
    cancelled: int = 0  # sequences dropped because their client went away
    preempted: int = 0  # sequences dropped because the KV budget ran out
    kv_tokens: int = 0  # KV cache tokens of the running sequences, after the last step
    running: int = 0  # sequences prefilling or in the decode batch, after the last step
    waiting: int = 0  # requests waiting to be admitted, at the last admission


@dataclass(eq=False)
class Sequence:
    stream: GenerationStream
    index: int
    prompt_ids: list[int]
    params: SamplingParams
    max_new_tokens: int
    seed: int
    tokens: TokenState
    detok: IncrementalDetokenizer
    text: StopText
    grammar: Matcher | None = None  # what the output must match (None: anything)
    output_ids: list[int] = field(default_factory=list)
    last_token: int = -1
    finished: bool = False
    retired: bool = False  # no longer counted in the engine's load
    preemptible: bool = False
    share: Share = DEFAULT  # whose it is (an API key's): counted as theirs (capacity.py)


@dataclass(eq=False)
class Group:
    """The ``n`` sequences of one request, sharing one prompt and one prefill."""

    stream: GenerationStream
    prompt_ids: list[int]
    seqs: list[Sequence]
    resume: Resume | None = None
    priority: int = 0  # its place in the waiting queue (scheduling/fair_share.py)
    tag: float = 0.0

    @property
    def kv_need(self) -> int:
        prior = len(self.resume.prior) if self.resume else 0
        return len(self.seqs) * kv_usage(len(self.prompt_ids), prior + 1)


def kv_tokens(running: list[Sequence]) -> int:
    """The KV cache the running sequences hold, in tokens."""
    return sum(kv_usage(len(s.prompt_ids), len(s.output_ids)) for s in running)
