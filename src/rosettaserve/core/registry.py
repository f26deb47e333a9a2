"""What the data plane needs to know about served models, independent of where they come from."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Protocol

from rosettaserve.core import dtypes
from rosettaserve.core.executor import ExecutionPool
from rosettaserve.core.invoker import Invocable
from rosettaserve.core.model import Model
from rosettaserve.core.queue_limit import Tenants
from rosettaserve.core.stats import ModelStats
from rosettaserve.core.types import TensorSpec

# ModelVersion.extra: seconds unused after which the version is unloaded, as a request set it
# (Ollama's keep_alive; negative: never); wins over model.yaml's unload_after_idle
# the classification extension's class names, one a line, in the model's folder (its labels)
CLASS_LABELS = "labels.txt"
KEEP_ALIVE = "keep_alive_s"
# ModelVersion.extra: set while it loads on demand (the server's readiness does not wait for it)
ON_DEMAND = "on_demand"


# An encoded answer as the response cache keeps it: the body, the buffers sent after it (REST's
# binary tensor data) and REST's Inference-Header-Content-Length (None: no binary data)
Encoded = tuple[bytes, tuple[bytes, ...], int | None]


class EncodedAnswers(Protocol):
    """A cached version's store of encoded answers (scheduling/response_cache.py), for the
    protocols that answer a small request again without parsing it: ``parts`` is all that
    makes the answer's bytes (the protocol, the request's bytes, the headers read)."""

    def encoded(self, parts: tuple[bytes | str | None, ...]) -> Encoded | None: ...

    def keep_encoded(self, parts: tuple[bytes | str | None, ...], answer: Encoded) -> None: ...


class VersionState(Enum):
    LOADING = "LOADING"
    READY = "READY"
    UNAVAILABLE = "UNAVAILABLE"  # failed to load, or every instance is stuck; ``reason``: why
    UNLOADING = "UNLOADING"
    UNLOADED = "UNLOADED"  # served, but loads on its next request; ``reason``: lazy, idle, evicted


@dataclass(frozen=True)
class DynamicBatching:
    """model.yaml's ``dynamic_batching`` (Triton's shape): when requests run together."""

    preferred_batch_size: tuple[int, ...] = ()
    max_queue_delay_microseconds: int = 0


@dataclass(frozen=True)
class SequenceControl:
    """One control tensor of a sequence model: its input name, what it carries and how."""

    name: str
    kind: str  # START, END, READY or CORRID (Triton's CONTROL_SEQUENCE_<kind>)
    false_true: tuple[int, int] = (0, 1)  # START, END, READY: the values for false and true
    datatype: str = "INT32"  # V2 name: INT32 for the flags, UINT64 or BYTES for CORRID


@dataclass(frozen=True)
class SequenceState:
    """An implicit state: fed as ``input_name``, the model's ``output_name`` is the next one."""

    input_name: str
    output_name: str
    datatype: str
    dims: tuple[int, ...]
    initial_dims: tuple[int, ...] | None = None  # initial_state given: zeros of these dims


@dataclass(frozen=True)
class SequenceBatching:
    """model.yaml's ``sequence_batching`` (Triton's shape): a stateful model's sequences."""

    idle_us: int = 1_000_000  # a sequence without requests this long is released
    strategy: str = "direct"  # or "oldest"
    controls: tuple[SequenceControl, ...] = ()
    states: tuple[SequenceState, ...] = ()
    max_candidate_sequences: int = 1  # oldest: sequences holding a slot of a lane at once
    preferred_batch_size: tuple[int, ...] = ()  # oldest
    max_queue_delay_us: int = 0


class Signature:
    """A version's inputs and outputs by name, for the checks every request and every answer
    goes through (core.dataplane, core.outputs)."""

    __slots__ = ("input_specs", "inputs", "output_names", "output_specs", "output_types", "outputs")

    def __init__(self, inputs: list[TensorSpec], outputs: list[TensorSpec]) -> None:
        self.inputs, self.outputs = inputs, outputs  # the lists it was built from
        self.input_specs = {s.name: s for s in inputs}
        self.output_specs = {s.name: s for s in outputs}
        self.output_names = list(self.output_specs)  # served in this order
        # None: a datatype not in the table, which a model's load() may set (model.yaml's are
        # checked when it is read); its answers are refused (core.outputs)
        self.output_types = {s.name: dtypes.DTYPES.get(s.datatype) for s in outputs}


@dataclass(eq=False)
class ModelVersion:
    """One version of one model, as it stands now."""

    name: str
    version: str
    runtime: str
    state: VersionState = VersionState.LOADING
    reason: str = ""
    model: Model | None = None
    invoker: Invocable | None = None  # the model's Invoker, or a batcher wrapping it
    instances: ExecutionPool | None = None  # where its calls run (watched for stuck calls)
    stalled_since: float = 0.0  # monotonic time every instance was found stuck (0: they are not)
    inputs: list[TensorSpec] = field(default_factory=list)
    outputs: list[TensorSpec] = field(default_factory=list)
    platform: str = ""
    max_batch_size: int = 0
    dynamic_batching: DynamicBatching | None = None  # set: requests are batched together
    sequence_batching: SequenceBatching | None = None  # set: a stateful model's sequences
    max_queue_size: int | None = None  # None: the server's default (0: no limit)
    timeout_us: int | None = None  # default request timeout; None: the server's (0: none)
    response_cache: bool = False  # its answers are cached (model.yaml asks, --cache-size is set)
    answers: EncodedAnswers | None = None  # this load's encoded answers (response_cache)
    load_seconds: float = 0.0
    resident_bytes: int = 0  # the memory its load took (measured), 0 while not loaded
    loaded_ms: int = 0  # wall time of its last load (ms): idle since this or its last request
    asleep: bool = False  # UNLOADED, its model kept asleep (core/sleep.py): it holds memory
    inflight: int = 0
    tenants: Tenants = field(default_factory=Tenants)  # in flight by API key, under a limit
    labels: list[str] = field(default_factory=list)
    class_labels: list[str] = field(default_factory=list)  # labels.txt: index -> class name
    extra: dict[str, Any] = field(default_factory=dict)
    stats: ModelStats = field(default_factory=ModelStats)
    _signature: Signature | None = field(default=None, repr=False)

    @property
    def ready(self) -> bool:
        return self.state is VersionState.READY

    def signature(self) -> Signature:
        """Inputs and outputs by name: built once, and again when either list is replaced."""
        sig = self._signature
        if sig is None or sig.inputs is not self.inputs or sig.outputs is not self.outputs:
            sig = self._signature = Signature(self.inputs, self.outputs)
        return sig

    def in_use(self) -> ModelVersion:
        """``with version.in_use():`` counts a request in flight on it (the version is its own
        context manager: cheaper per request than a generator-based one)."""
        return self

    def __enter__(self) -> None:
        self.inflight += 1

    def __exit__(self, *exc: object) -> None:
        self.inflight -= 1


class Registry(Protocol):
    """The served models: implemented by the on-disk repository."""

    def model_names(self) -> list[str]: ...

    def versions(self, name: str) -> list[ModelVersion] | None:
        """Served versions of ``name``, oldest first; None if the name is unknown."""
        ...

    def version_for_label(self, name: str, label: str) -> str | None: ...


@dataclass(frozen=True)
class IndexEntry:
    name: str
    version: str
    state: str
    reason: str
    resident_bytes: int = 0  # the memory a loaded version holds (measured at its load)
    asleep: bool = False  # its model sleeps (core/sleep.py), holding resident_bytes still


class ModelControl(Protocol):
    """Loading and unloading on request (the model repository extension)."""

    def index(self) -> list[IndexEntry]: ...

    async def load_model(self, name: str) -> None: ...

    async def unload_model(self, name: str) -> None: ...
