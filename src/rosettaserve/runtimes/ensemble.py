"""``runtime: ensemble`` (Triton's ensemble models): a request runs through served models as
steps, each step once the ensemble tensors it reads exist (several at once where they can: fan-out
and fan-in), each step's outputs becoming ensemble tensors by its ``output_map``.

Steps are calls through the data plane (core/model_calls.py): each composing model's queue,
batcher and statistics see the calls it served, and the arrays pass from step to step as they
are. The ensemble's own deadline goes with every call (the time left of it); the first failing
step ends the request with that step's error, the others cancelled.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from time import perf_counter_ns
from typing import Any

from rosettaserve.core.call import Call
from rosettaserve.core.errors import DeadlineExceeded, ModelError, ServingError
from rosettaserve.core.model import Arrays, Model


@dataclass(frozen=True)
class Step:
    index: int
    model: str
    version: str | None  # None: the highest ready version
    input_map: dict[str, str]  # step input -> ensemble tensor
    output_map: dict[str, str]  # step output -> ensemble tensor


class EnsembleModel(Model):
    platform = "ensemble"
    takes_call = True  # its deadline goes with every step's call

    def load(self) -> None:
        self.steps = [_step(i, doc) for i, doc in enumerate(self.config.get("steps") or [])]
        check_graph(self.steps, [t.name for t in self.inputs], [t.name for t in self.outputs])

    async def predict(
        self, inputs: Arrays, parameters: dict[str, Any] | None = None, call: Call | None = None
    ) -> Any:
        call = call or Call(perf_counter_ns())
        call.ran = perf_counter_ns()
        tensors: Arrays = dict(inputs)
        made = {name: asyncio.Event() for s in self.steps for name in s.output_map.values()}
        loop = asyncio.get_running_loop()  # (tasks of their own: the request may have none)
        steps = [
            loop.create_task(self._run(step, tensors, made, call, parameters or {}))
            for step in self.steps
        ]
        try:
            await asyncio.wait(steps, return_when=asyncio.FIRST_EXCEPTION)
            failures = [t.exception() for t in steps if t.done() and not t.cancelled()]
            errors = [exc for exc in failures if exc is not None]
            if errors:
                raise _first(errors)
        finally:
            for task in steps:
                task.cancel()  # (a step still waiting: the request ended without it)
            call.done = perf_counter_ns()
        return {t.name: tensors[t.name] for t in self.outputs}

    async def _run(
        self,
        step: Step,
        tensors: Arrays,
        made: dict[str, asyncio.Event],
        call: Call,
        parameters: dict[str, Any],
    ) -> None:
        for source in step.input_map.values():
            if source in made:
                await made[source].wait()
        inputs = {name: tensors[source] for name, source in step.input_map.items()}
        assert self.calls is not None
        outputs = await self.calls.infer(
            step.model,
            inputs,
            step.version,
            outputs=list(step.output_map),
            timeout_us=_time_left_us(call),
            parameters=parameters,
        )
        for name, target in step.output_map.items():
            if name not in outputs:
                raise ModelError(
                    f"ensemble '{self.name}' step {step.index}: model '{step.model}' gave no "
                    f"output '{name}'"
                )
            tensors[target] = outputs[name]
            made[target].set()


def _step(index: int, doc: dict[str, Any]) -> Step:
    version = doc.get("model_version", -1)
    return Step(
        index,
        doc["model_name"],
        None if version == -1 else str(version),
        dict(doc["input_map"]),
        dict(doc["output_map"]),
    )


def check_graph(steps: list[Step], inputs: list[str], outputs: list[str]) -> None:
    """What Triton checks of an ensemble at load (a ValueError: the load fails saying it)."""
    if not steps:
        raise ValueError("an ensemble needs 'steps'")
    producer: dict[str, int] = {}
    for step in steps:
        for target in step.output_map.values():
            if target in inputs or target in producer:
                first = "an ensemble input" if target in inputs else f"step {producer[target]}"
                raise ValueError(
                    f"ensemble tensor '{target}' is written by step {step.index} and by {first}"
                )
            producer[target] = step.index
    for step in steps:
        for source in step.input_map.values():
            if source not in inputs and source not in producer:
                raise ValueError(
                    f"step {step.index} ({step.model}) reads '{source}', which is neither an "
                    "ensemble input nor a step's output"
                )
    missing = [name for name in outputs if name not in producer]
    if missing:
        raise ValueError(f"no step writes the ensemble output(s) {', '.join(missing)}")
    _check_acyclic(steps, producer)


def _check_acyclic(steps: list[Step], producer: dict[str, int]) -> None:
    after = {s.index: {producer[x] for x in s.input_map.values() if x in producer} for s in steps}
    done: set[int] = set()
    while len(done) < len(steps):
        ready = [i for i, needs in after.items() if i not in done and needs <= done]
        if not ready:
            stuck = sorted(set(after) - done)
            raise ValueError(f"the steps {stuck} wait for each other's outputs (a cycle)")
        done.update(ready)


def _time_left_us(call: Call) -> int | None:
    if call.deadline is None:
        return None
    left = call.deadline - asyncio.get_running_loop().time()
    if left <= 0:
        raise DeadlineExceeded("the ensemble's request timeout passed before this step")
    return max(1, int(left * 1e6))


def _first(errors: list[BaseException]) -> BaseException:
    """The error a client gets: the first step's ServingError (its kind and message)."""
    for exc in errors:
        if isinstance(exc, ServingError):
            return exc
    return errors[0]
