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
    cache_hit: Duration = field(default_factory=Duration)  # answered from the response cache
    cache_miss: Duration = field(default_factory=Duration)  # looked up, ran, answer kept
    batches: dict[int, BatchStats] = field(default_factory=dict)

    def record_success(self, batch_size: int, call: Call, end: int) -> None:
        """One request: taken, handed to the model, model ran, model done, response built (ns).

        ``ran`` - ``submitted`` is its queue time (a batcher's queue, or the wait for a thread).
        """
        start, submitted = call.start, call.submitted
        ran = call.ran or submitted
        done = call.done or ran
        self.last_inference_ms = time.time_ns() // 1_000_000
        self.inference_count += batch_size
        # Duration.add, written out: this runs on every request
        success, queue, compute_input = self.success, self.queue, self.compute_input
        compute_infer, compute_output = self.compute_infer, self.compute_output
        success.count += 1
        success.ns += end - start
        queue.count += 1
        queue.ns += ran - submitted
        compute_input.count += 1
        compute_input.ns += submitted - start
        compute_infer.count += 1
        compute_infer.ns += done - ran
        compute_output.count += 1
        compute_output.ns += end - done

    def record_cache_hit(self, call: Call, end: int) -> None:
        """A request the response cache answered: a success, with its lookup as its cache hit
        time and no queue time; the model did not run (no inference, execution or compute
        figures: Triton's statistics count them the same way)."""
        self.last_inference_ms = time.time_ns() // 1_000_000
        self.success.add(end - call.start)
        self.queue.add(0)
        self.cache_hit.add(call.cache_hit_ns)

    def record_execution(
        self, batch_size: int, input_ns: int, infer_ns: int, output_ns: int
    ) -> None:
        """One model execution, of a batch of ``batch_size`` rows (one request's, or many)."""
        self.execution_count += 1
        batch = self.batches.get(batch_size)
        if batch is None:
            batch = self.batches[batch_size] = BatchStats()
        compute_input, compute_infer, compute_output = (
            batch.compute_input,
            batch.compute_infer,
            batch.compute_output,
        )
        compute_input.count += 1
        compute_input.ns += input_ns
        compute_infer.count += 1
        compute_infer.ns += infer_ns
        compute_output.count += 1
        compute_output.ns += output_ns

    def record_failure(self, start: int) -> None:
        self.last_inference_ms = time.time_ns() // 1_000_000
        self.fail.add(time.perf_counter_ns() - start)
