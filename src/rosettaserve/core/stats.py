"""Per model-version inference statistics, recorded by the data plane (Triton's shape)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from rosettaserve.core.call import Call


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
    inference_count: int = 0  # batch items (rows) of successful requests
    execution_count: int = 0  # model executions (a batch of many requests is one)
    success: Duration = field(default_factory=Duration)
    fail: Duration = field(default_factory=Duration)
    queue: Duration = field(default_factory=Duration)
    compute_input: Duration = field(default_factory=Duration)
    compute_infer: Duration = field(default_factory=Duration)
    compute_output: Duration = field(default_factory=Duration)
    batches: dict[int, BatchStats] = field(default_factory=dict)

    def record_success(self, batch_size: int, call: Call, end: int) -> None:
        """One request: taken, handed to the model, model ran, model done, response built (ns).

        ``ran`` - ``submitted`` is its queue time (a batcher's queue, or the wait for a thread).
        """
        ran = call.ran or call.submitted
        done = call.done or ran
        self.last_inference_ms = time.time_ns() // 1_000_000
        self.inference_count += batch_size
        self.success.add(end - call.start)
        self.queue.add(ran - call.submitted)
        self.compute_input.add(call.submitted - call.start)
        self.compute_infer.add(done - ran)
        self.compute_output.add(end - done)

    def record_execution(
        self, batch_size: int, input_ns: int, infer_ns: int, output_ns: int
    ) -> None:
        """One model execution, of a batch of ``batch_size`` rows (one request's, or many)."""
        self.execution_count += 1
        batch = self.batches.get(batch_size)
        if batch is None:
            batch = self.batches[batch_size] = BatchStats()
        batch.compute_input.add(input_ns)
        batch.compute_infer.add(infer_ns)
        batch.compute_output.add(output_ns)

    def record_failure(self, start: int) -> None:
        self.last_inference_ms = time.time_ns() // 1_000_000
        self.fail.add(time.perf_counter_ns() - start)
