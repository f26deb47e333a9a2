"""Per model-version inference statistics, recorded by the data plane (Triton's shape)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field


@dataclass(slots=True)
class Duration:
    count: int = 0
    ns: int = 0

    def add(self, ns: int, count: int = 1) -> None:
        self.count += count
        self.ns += ns


@dataclass(slots=True)
class BatchStats:
    compute_input: Duration = field(default_factory=Duration)
    compute_infer: Duration = field(default_factory=Duration)
    compute_output: Duration = field(default_factory=Duration)


@dataclass(slots=True)
class ModelStats:
    last_inference_ms: int = 0
    inference_count: int = 0  # batch items
    execution_count: int = 0  # model executions
    success: Duration = field(default_factory=Duration)
    fail: Duration = field(default_factory=Duration)
    queue: Duration = field(default_factory=Duration)
    compute_input: Duration = field(default_factory=Duration)
    compute_infer: Duration = field(default_factory=Duration)
    compute_output: Duration = field(default_factory=Duration)
    batches: dict[int, BatchStats] = field(default_factory=dict)

    def record_success(self, batch_size: int, start: int, ran: int, done: int, end: int) -> None:
        """Timestamps (ns): request start, model call start, model call end, response built."""
        self.last_inference_ms = time.time_ns() // 1_000_000
        self.inference_count += batch_size
        self.execution_count += 1
        self.success.add(end - start)
        self.compute_input.add(ran - start)
        self.compute_infer.add(done - ran)
        self.compute_output.add(end - done)
        batch = self.batches.get(batch_size)
        if batch is None:
            batch = self.batches[batch_size] = BatchStats()
        batch.compute_input.add(ran - start)
        batch.compute_infer.add(done - ran)
        batch.compute_output.add(end - done)

    def record_failure(self, start: int) -> None:
        self.last_inference_ms = time.time_ns() // 1_000_000
        self.fail.add(time.perf_counter_ns() - start)
