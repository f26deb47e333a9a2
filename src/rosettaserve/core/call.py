"""One request's trip through a model: its deadline and when each stage happened.

The data plane creates a ``Call`` per request and hands it to the model's invoker (or to a
wrapper around it, such as the dynamic batcher), which fills in when the model ran. Statistics
and metrics are read from it afterwards.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

# InferenceRequest.context keys set by protocol adapters (the tensors never see them; Final:
# compiled, a constant where they are read, not a lookup in the module's dict)
PROTOCOL: Final = "protocol"  # which adapter the request came through, e.g. "oip_rest"
TIMEOUT_US: Final = "timeout_us"  # the request's own timeout in microseconds (0: none)


@dataclass(init=False, slots=True)
class Call:
    start: int  # perf_counter_ns when the data plane took the request
    deadline: float | None  # event loop time after which the work is dropped
    submitted: int  # handed to the invoker, after validation
    ran: int  # the model began executing (its thread started, or its batch did)
    done: int  # the model finished executing
    batch_size: int  # rows of the batch it ran in, when a batcher ran it (0: ran alone)
    instance: int  # the execution instance a scheduler binds it to (-1: any free one)
    cache_hit_ns: int  # answered from the response cache: the lookup's time (0: it was not)

    def __init__(
        self,
        start: int,
        *,
        deadline: float | None = None,
        submitted: int = 0,
        ran: int = 0,
        done: int = 0,
        batch_size: int = 0,
        instance: int = -1,
        cache_hit_ns: int = 0,
    ) -> None:  # (its own, not the dataclass's: why in scripts/compile_native.py)
        self.start = start
        self.deadline = deadline
        self.submitted = submitted
        self.ran = ran
        self.done = done
        self.batch_size = batch_size
        self.instance = instance
        self.cache_hit_ns = cache_hit_ns

    @property
    def queue_ns(self) -> int:
        return self.ran - self.submitted if self.ran >= self.submitted > 0 else 0

    @property
    def compute_ns(self) -> int:
        return self.done - self.ran if self.done >= self.ran > 0 else 0
