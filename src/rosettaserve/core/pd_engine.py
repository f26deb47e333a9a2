"""What prefill/decode disaggregation asks of an engine: a capability, not an engine class.

pd/ reaches an engine only through ``PdEngine``, which a text generator hands out explicitly
(``PdCapable.pd_engine``; None: its engine cannot take part). Two kinds of engine take part:
  - one that hands its KV cache over and takes one computed elsewhere (``kv``: runtime llm):
    a prefill instance stops after the first token and ships the cache, a decode instance
    starts from it;
  - one that does not (``kv`` is None: runtime vllm): a decode instance recomputes the cache
    of the prompt and the prefill instance's tokens (``resume``).

The engine-side vocabulary of a hand-over (``Resume``, ``Handoff``, ``Preempted``) and the shape
of a cache (``Geometry``) live here too: the roles and the engines meet on these names alone.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from rosettaserve.core.errors import ServingError
from rosettaserve.core.generate import DeltaStream, GenerateRequest
from rosettaserve.core.status import ErrorKind

# A sequence's KV cache: one (keys, values) pair of tensors per layer, each
# [1, kv_heads, tokens, head_dim] (runtimes/llm/batch.py holds them as torch tensors).
KV = list[tuple[Any, Any]]
ITEM_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2, "float64": 8}  # by dtype name


@dataclass(frozen=True)
class Geometry:
    """What a KV cache of this model looks like, per token: the reader's expectations."""

    layers: int
    kv_heads: int
    head_dim: int
    dtype: str  # a key of ITEM_BYTES
    fingerprint: str  # the model's: two instances must serve the same model to share caches

    def nbytes(self, tokens: int) -> int:
        return 2 * self.layers * self.kv_heads * self.head_dim * tokens * ITEM_BYTES[self.dtype]


@dataclass
class Handoff:
    """Filled by the engine before the chosen token's delta is delivered (a prefill instance)."""

    kv: KV | None = None  # the cache of prompt + prior tokens (every token before the new one)
    seed: int = 0
    sampler_state: bytes | None = None  # the sequence's sampler state after the draw


@dataclass
class Resume:
    """Starting a sequence elsewhere than at its prompt (runtimes/llm/resume.py tells how)."""

    prior: list[int] = field(default_factory=list)
    kv: KV | None = None  # covers prompt + prior[:-1]; prior[-1] is fed at the next step
    seed: int | None = None
    sampler_state: bytes | None = None
    emit_prior: bool = False  # send the prior tokens' deltas again (with logprobs if asked)
    handoff: Handoff | None = None
    preemptible: bool = False


class Preempted(ServingError):
    """The KV budget ran out: this sequence was dropped to let the others go on. It carries
    what is needed to recompute the sequence elsewhere."""

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


class EngineLimits(Protocol):
    @property
    def max_model_len(self) -> int: ...

    @property
    def max_num_seqs(self) -> int: ...

    @property
    def kv_budget_tokens(self) -> int:
        """0: no budget of its own."""
        ...


class EngineLoad(Protocol):
    @property
    def running(self) -> int: ...

    @property
    def waiting(self) -> int: ...

    @property
    def kv_tokens(self) -> int: ...

    @property
    def preempted(self) -> int: ...


class PrefixHolder(Protocol):
    """An engine's prefix cache as a prefill instance reports it (pd/prefix_report.py): blocks
    named by opaque digests, a prompt's prefix held when its leading digests are."""

    @property
    def block(self) -> int:
        """Tokens a block."""
        ...

    @property
    def capacity(self) -> int:
        """Tokens it holds at most (0: the cache is off)."""
        ...

    def digests(self, tokens: list[int], count: int) -> list[bytes]:
        """The names of the whole blocks of ``tokens[:count]``, in order."""
        ...

    def held(self, digests: list[bytes]) -> int:
        """How many of ``digests``, from the first, it holds now (touching nothing)."""
        ...


class KvHandover(Protocol):
    """An engine that hands KV caches over and takes them."""

    @property
    def prefix_cache(self) -> PrefixHolder:
        """The engine's prefix cache, which a prefill instance reports the contents of."""
        ...

    def check_ids(self, ids: list[int]) -> None:
        """InvalidInput unless every id is in the vocabulary and they fit the window."""

    def submit(
        self, request: GenerateRequest, prompt_ids: list[int], resume: Resume | None = None
    ) -> DeltaStream: ...

    def kv_geometry(self) -> Geometry: ...

    def kv_to_device(self, kv: KV) -> KV:
        """A cache read from the wire, moved where the engine computes."""
        ...


class PdEngine(Protocol):
    @property
    def config(self) -> EngineLimits: ...

    @property
    def stats(self) -> EngineLoad: ...

    @property
    def kv(self) -> KvHandover | None:
        """The KV cache hand-over (None: the engine takes no cache from elsewhere)."""
        ...

    def prompt_ids(self, request: GenerateRequest) -> list[int]: ...

    def resume(
        self, request: GenerateRequest, prompt_ids: list[int], prior: list[int], emit_prior: bool
    ) -> DeltaStream:
        """``request`` going on after ``prior`` (output tokens made elsewhere), the cache of the
        prompt and of them computed here; with ``emit_prior`` they come first as deltas."""
        ...


@runtime_checkable
class PdCapable(Protocol):
    """A text generator that may take part in prefill/decode disaggregation."""

    def pd_engine(self) -> PdEngine | None: ...


def pd_engine(generator: object) -> PdEngine | None:
    """``generator``'s engine as PD sees it (None: it cannot take part)."""
    return generator.pd_engine() if isinstance(generator, PdCapable) else None
