"""The dynamic batcher through the data plane: batches form while the model is busy, outputs go
back to the right requests, kinds are not mixed, deadlines and queue limits drop work.

The model holds its first call on an event the test sets, so which requests wait together is
decided by the test, not by timing.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import numpy as np
import pytest

from rosettaserve import Model
from rosettaserve.core.call import PROTOCOL, TIMEOUT_US
from rosettaserve.core.dataplane import DataPlane, Limits
from rosettaserve.core.errors import DeadlineExceeded, InvalidInput, ModelError, Overloaded
from rosettaserve.core.invoker import Invoker
from rosettaserve.core.registry import DynamicBatching, ModelVersion, VersionState
from rosettaserve.core.types import InferenceRequest, InferenceResponse, Tensor, TensorSpec
from rosettaserve.scheduling.batcher import DynamicBatcher, _stack, schedule
from tests.unit.metrics_support import OneModel


class Recorder(Model):
    """Y = 2 * X + (the row's own offset). Records every batch it is given; holds the first."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.seen: list[np.ndarray] = []
        self.gate = asyncio.Event()
        self.rows_out: int | None = None  # set: return this many rows (a broken model)

    async def predict(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        x = inputs["X"]
        self.seen.append(x.copy())
        if len(self.seen) == 1:
            await self.gate.wait()
        y = 2 * x + 0.5
        return {"Y": y if self.rows_out is None else y[: self.rows_out]}


class ParamRecorder(Recorder):
    async def predict(  # type: ignore[override]
        self, inputs: dict[str, np.ndarray], parameters: dict[str, Any]
    ) -> dict[str, np.ndarray]:
        out = await super().predict(inputs)
        return {"Y": out["Y"] * float(parameters.get("scale", 1))}


def served(
    model: Recorder,
    policy: DynamicBatching | None = None,
    max_batch_size: int = 8,
    max_queue_size: int | None = None,
) -> ModelVersion:
    mv = ModelVersion(
        name="m",
        version="1",
        runtime="python",
        state=VersionState.READY,
        model=model,
        inputs=[TensorSpec("X", "FP32", (-1, -1))],
        outputs=[TensorSpec("Y", "FP32", (-1, -1))],
        max_batch_size=max_batch_size,
        max_queue_size=max_queue_size,
    )
    mv.invoker = schedule(mv, Invoker(model), policy or DynamicBatching())
    return mv


def plane(mv: ModelVersion, limits: Limits | None = None) -> DataPlane:
    dp = DataPlane(OneModel(mv), limits=limits)
    dp.started = True
    return dp


def request(x: np.ndarray, **context: Any) -> InferenceRequest:
    x = np.asarray(x, np.float32)
    tensor = Tensor("X", "FP32", tuple(x.shape), x)
    return InferenceRequest("m", [tensor], context={PROTOCOL: "test", **context})


def batcher(mv: ModelVersion) -> DynamicBatcher:
    assert isinstance(mv.invoker, DynamicBatcher)
    return mv.invoker


async def until(check: Callable[[], bool]) -> None:
    """Yield to the event loop until ``check`` holds (bounded, so a bug fails, not hangs)."""
    for _ in range(10_000):
        if check():
            return
        await asyncio.sleep(0)
    raise AssertionError("condition never reached")


async def first_held(dp: DataPlane, model: Recorder) -> asyncio.Task[InferenceResponse]:
    """A first request that the model holds, so the next ones queue behind it."""
    task = asyncio.create_task(dp.infer(request([[100.0, 100.0]])))
    await until(lambda: len(model.seen) == 1)
    return task


def gather(dp: DataPlane, requests: list[InferenceRequest]) -> list[asyncio.Task[Any]]:
    return [asyncio.create_task(dp.infer(r)) for r in requests]


def run(test: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(asyncio.wait_for(test(), timeout=30))


def test_queued_requests_run_as_one_batch_and_each_gets_its_own_rows() -> None:
    async def body() -> None:
        model = Recorder()
        mv = served(model, max_batch_size=16)
        dp = plane(mv)
        held = await first_held(dp, model)
        inputs = [np.full((i % 3 + 1, 2), float(i), np.float32) for i in range(5)]  # 1..3 rows
        tasks = gather(dp, [request(x) for x in inputs])
        await until(lambda: batcher(mv).waiting == 5)
        model.gate.set()
        await held
        responses = await asyncio.gather(*tasks)
        assert [len(b) for b in model.seen] == [1, sum(len(x) for x in inputs)]
        for x, response in zip(inputs, responses, strict=True):
            (y,) = response.outputs
            assert y.shape == x.shape
            np.testing.assert_array_equal(y.data, 2 * x + 0.5)
        stats = mv.stats
        assert stats.execution_count == 2
        assert sorted(stats.batches) == [1, 9]
        assert stats.inference_count == 10
        assert stats.queue.count == 6

    run(body)


def test_batches_stop_at_max_batch_size_and_keep_arrival_order() -> None:
    async def body() -> None:
        model = Recorder()
        mv = served(model, max_batch_size=4)
        dp = plane(mv)
        held = await first_held(dp, model)
        inputs = [np.full((1, 2), float(i), np.float32) for i in range(10)]
        tasks = gather(dp, [request(x) for x in inputs])
        await until(lambda: batcher(mv).waiting == 10)
        model.gate.set()
        await held
        responses = await asyncio.gather(*tasks)
        assert [len(b) for b in model.seen] == [1, 4, 4, 2]
        order = np.concatenate(model.seen[1:])[:, 0]
        assert order.tolist() == list(range(10))
        for x, response in zip(inputs, responses, strict=True):
            np.testing.assert_array_equal(response.outputs[0].data, 2 * x + 0.5)

    run(body)


def test_inputs_of_different_shapes_are_never_mixed() -> None:
    async def body() -> None:
        model = Recorder()
        mv = served(model)
        dp = plane(mv)
        held = await first_held(dp, model)
        inputs = [
            np.full((1, 2), 1.0, np.float32),
            np.full((2, 3), 2.0, np.float32),
            np.full((1, 2), 3.0, np.float32),
            np.full((1, 3), 4.0, np.float32),
        ]
        tasks = gather(dp, [request(x) for x in inputs])
        await until(lambda: batcher(mv).waiting == 4)
        model.gate.set()
        await held
        responses = await asyncio.gather(*tasks)
        batches = [b[:, 0].tolist() for b in model.seen[1:]]
        assert batches == [[1.0, 3.0], [2.0, 2.0, 4.0]]
        assert {b.shape[1] for b in model.seen[1:]} == {2, 3}
        for x, response in zip(inputs, responses, strict=True):
            np.testing.assert_array_equal(response.outputs[0].data, 2 * x + 0.5)

    run(body)


def test_inputs_of_other_byte_orders_are_never_mixed() -> None:
    """The same datatype in another byte order is another kind: concatenating would convert."""

    async def body() -> None:
        model = Recorder()
        mv = served(model)
        dp = plane(mv)
        held = await first_held(dp, model)
        inputs = [
            np.full((1, 2), 1.0, np.float32),
            np.full((1, 2), 2.0, ">f4"),
            np.full((1, 2), 3.0, np.float32),
        ]
        reqs = [InferenceRequest("m", [Tensor("X", "FP32", (1, 2), x)]) for x in inputs]
        tasks = gather(dp, reqs)
        await until(lambda: batcher(mv).waiting == 3)
        model.gate.set()
        await held
        responses = await asyncio.gather(*tasks)
        assert [b[:, 0].tolist() for b in model.seen[1:]] == [[1.0, 3.0], [2.0]]
        assert model.seen[2].dtype == np.dtype(">f4")
        for x, response in zip(inputs, responses, strict=True):
            np.testing.assert_array_equal(response.outputs[0].data, 2 * x + 0.5)

    run(body)


def test_a_scalar_input_is_refused() -> None:
    async def body() -> None:
        model = Recorder()
        mv = served(model)
        mv.inputs = []  # no declared signature: only the batcher can notice
        dp = plane(mv)
        req = InferenceRequest("m", [Tensor("X", "FP32", (), np.float32(1.0).reshape(()))])
        with pytest.raises(InvalidInput, match="no batch dimension"):
            await dp.infer(req)
        assert not model.seen

    run(body)


def test_requests_with_different_parameters_are_not_mixed() -> None:
    async def body() -> None:
        model = ParamRecorder()
        mv = served(model)
        dp = plane(mv)
        held = await first_held(dp, model)
        scales = [1, 3, 1, 3]
        reqs = [request(np.full((1, 2), float(i), np.float32)) for i in range(4)]
        for req, scale in zip(reqs, scales, strict=True):
            req.parameters = {"scale": scale}
        tasks = gather(dp, reqs)
        await until(lambda: batcher(mv).waiting == 4)
        model.gate.set()
        await held
        responses = await asyncio.gather(*tasks)
        assert [b[:, 0].tolist() for b in model.seen[1:]] == [[0.0, 2.0], [1.0, 3.0]]
        for i, (scale, response) in enumerate(zip(scales, responses, strict=True)):
            assert response.outputs[0].data.tolist() == [[(2 * i + 0.5) * scale] * 2]

    run(body)


def test_deadline_while_queued_drops_the_request_before_it_runs() -> None:
    async def body() -> None:
        model = Recorder()
        mv = served(model)
        dp = plane(mv)
        held = await first_held(dp, model)
        doomed = asyncio.create_task(dp.infer(request([[7.0, 7.0]], **{TIMEOUT_US: 20_000})))
        with pytest.raises(DeadlineExceeded, match="expired while queued"):
            await doomed
        assert batcher(mv).waiting == 0  # it left the queue
        model.gate.set()
        await held
        after = await dp.infer(request([[1.0, 1.0]]))
        assert after.outputs[0].data.tolist() == [[2.5, 2.5]]
        assert all(7.0 not in b for b in model.seen)  # the model never saw it
        assert mv.stats.fail.count == 1

    run(body)


def test_deadline_while_running_discards_the_result() -> None:
    async def body() -> None:
        model = Recorder()
        mv = served(model)
        dp = plane(mv)
        with pytest.raises(DeadlineExceeded, match="while it ran"):
            await dp.infer(request([[5.0, 5.0]], **{TIMEOUT_US: 20_000}))
        model.gate.set()
        response = await dp.infer(request([[1.0, 1.0]]))
        assert response.outputs[0].data.tolist() == [[2.5, 2.5]]

    run(body)


def test_server_and_model_default_timeouts_apply_and_a_request_overrides_them() -> None:
    async def body() -> None:
        model = Recorder()
        mv = served(model)
        mv.timeout_us = 20_000  # the model's default beats the server's (none)
        dp = plane(mv, Limits(timeout_us=0))
        with pytest.raises(DeadlineExceeded, match="timeout of 20 ms"):
            await dp.infer(request([[5.0, 5.0]]))
        pending = asyncio.create_task(dp.infer(request([[1.0, 1.0]], **{TIMEOUT_US: 0})))
        await until(lambda: batcher(mv).waiting == 1)  # behind the held first call
        model.gate.set()  # the first (timed out) call still holds the model until now
        assert (await pending).outputs[0].data.tolist() == [[2.5, 2.5]]

    run(body)


def test_queue_limit_refuses_at_once_with_retry_after() -> None:
    async def body() -> None:
        model = Recorder()
        mv = served(model, max_queue_size=2)
        dp = plane(mv)
        held = await first_held(dp, model)
        queued = gather(dp, [request([[1.0, 1.0]]), request([[2.0, 2.0]])])
        await until(lambda: batcher(mv).waiting == 2)
        with pytest.raises(Overloaded) as refused:
            await dp.infer(request([[3.0, 3.0]]))
        assert refused.value.http_status == 429
        assert refused.value.headers == {"retry-after": "1"}
        model.gate.set()
        await held
        assert len(await asyncio.gather(*queued)) == 2

    run(body)


def test_server_default_queue_limit_counts_requests_in_an_unbatched_model() -> None:
    async def body() -> None:
        model = Recorder()
        mv = served(model, max_batch_size=0)
        assert isinstance(mv.invoker, Invoker)  # no batch dimension: never batched
        dp = plane(mv, Limits(max_queue_size=1))
        held = await first_held(dp, model)
        with pytest.raises(Overloaded):
            await dp.infer(request([[3.0, 3.0]]))
        model.gate.set()
        await held
        assert (await dp.infer(request([[1.0, 1.0]]))).outputs[0].data.tolist() == [[2.5, 2.5]]

    run(body)


def test_a_preferred_batch_size_runs_without_waiting_for_the_delay() -> None:
    async def body() -> None:
        model = Recorder()
        mv = served(model, DynamicBatching((3,), max_queue_delay_microseconds=3_600_000_000))
        dp = plane(mv)
        model.gate.set()
        inputs = [np.full((1, 2), float(i), np.float32) for i in range(3)]
        responses = await asyncio.gather(*gather(dp, [request(x) for x in inputs]))
        assert [len(b) for b in model.seen] == [3]  # an hour of delay was not waited
        for x, response in zip(inputs, responses, strict=True):
            np.testing.assert_array_equal(response.outputs[0].data, 2 * x + 0.5)

    run(body)


def test_a_full_batch_runs_without_waiting_for_the_delay() -> None:
    async def body() -> None:
        model = Recorder()
        policy = DynamicBatching(max_queue_delay_microseconds=3_600_000_000)
        mv = served(model, policy, max_batch_size=4)
        dp = plane(mv)
        model.gate.set()
        inputs = [np.full((2, 2), float(i), np.float32) for i in range(2)]
        await asyncio.gather(*gather(dp, [request(x) for x in inputs]))
        assert [len(b) for b in model.seen] == [4]

    run(body)


def test_a_model_returning_the_wrong_number_of_rows_fails_the_whole_batch() -> None:
    async def body() -> None:
        model = Recorder()
        mv = served(model)
        dp = plane(mv)
        held = await first_held(dp, model)
        tasks = gather(dp, [request([[1.0, 1.0]]), request([[2.0, 2.0]])])
        await until(lambda: batcher(mv).waiting == 2)
        model.rows_out = 1
        model.gate.set()
        await held  # a batch of one is passed through as it is
        for task in tasks:
            with pytest.raises(ModelError, match="returned 1 rows in output 'Y' for a batch of 2"):
                await task

    run(body)


def test_inputs_disagreeing_on_the_batch_dimension_are_refused() -> None:
    async def body() -> None:
        model = Recorder()
        mv = served(model)
        mv.inputs = []  # no declared signature: only the batcher can notice
        dp = plane(mv)
        x = np.zeros((2, 2), np.float32)
        z = np.zeros((3, 2), np.float32)
        req = InferenceRequest(
            "m", [Tensor("X", "FP32", (2, 2), x), Tensor("Z", "FP32", (3, 2), z)]
        )
        with pytest.raises(InvalidInput, match="share their first"):
            await dp.infer(req)

    run(body)


def test_a_cancelled_request_leaves_the_queue() -> None:
    async def body() -> None:
        model = Recorder()
        mv = served(model)
        dp = plane(mv)
        held = await first_held(dp, model)
        gone = asyncio.create_task(dp.infer(request([[9.0, 9.0]])))
        await until(lambda: batcher(mv).waiting == 1)
        gone.cancel()  # the client went away
        await until(lambda: batcher(mv).waiting == 0)
        model.gate.set()
        await held
        assert all(9.0 not in b for b in model.seen)

    run(body)


def test_streaming_and_unbatched_models_are_not_wrapped() -> None:
    class Gen(Model):
        def predict(self, inputs: dict[str, np.ndarray]) -> Any:
            yield inputs

    gen = served(Recorder())
    gen.invoker = schedule(gen, Invoker(Gen()), DynamicBatching())
    assert isinstance(gen.invoker, Invoker)
    flat = served(Recorder(), max_batch_size=0)
    assert isinstance(flat.invoker, Invoker)
    assert flat.dynamic_batching is None


def test_many_requests_with_cancellations_and_timeouts_all_settle() -> None:
    """A stress run: every request answers with its own rows, times out or is cancelled; none
    hangs, and the queue ends empty."""

    class Sleepy(Recorder):
        async def predict(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
            self.seen.append(inputs["X"].copy())
            await asyncio.sleep(0.001 * (len(self.seen) % 3))
            return {"Y": 2 * inputs["X"] + 0.5}

    async def body() -> None:
        model = Sleepy()
        mv = served(model, DynamicBatching((4,), 200), max_batch_size=8)
        dp = plane(mv)
        rng = np.random.default_rng(3)
        inputs = [rng.random((1 + i % 3, 2 + i % 2)).astype(np.float32) for i in range(400)]
        timeouts = [{TIMEOUT_US: 1_000} if i % 7 == 0 else {} for i in range(400)]
        tasks = [
            asyncio.create_task(dp.infer(request(x, **t)))
            for x, t in zip(inputs, timeouts, strict=True)
        ]
        for i in range(0, 400, 11):
            tasks[i].cancel()
        results = await asyncio.gather(*tasks, return_exceptions=True)
        answered = 0
        for x, result in zip(inputs, results, strict=True):
            if isinstance(result, BaseException):
                assert isinstance(result, DeadlineExceeded | asyncio.CancelledError)
                continue
            np.testing.assert_array_equal(result.outputs[0].data, 2 * x + 0.5)
            answered += 1
        assert answered > 300
        assert batcher(mv).waiting == 0
        assert mv.inflight == 0
        after = await dp.infer(request(np.ones((1, 2), np.float32)))
        assert after.outputs[0].data.tolist() == [[2.5, 2.5]]

    run(body)


def test_a_streaming_call_on_a_batched_model_is_batched_and_counted_once() -> None:
    async def body() -> None:
        model = Recorder()
        model.gate.set()
        mv = served(model)
        dp = plane(mv)
        responses = [r async for r in dp.infer_stream(request([[1.0, 1.0]]))]
        assert [r.outputs[0].data.tolist() for r in responses] == [[[2.5, 2.5]]]
        assert mv.stats.execution_count == 1
        assert mv.stats.inference_count == 1
        assert sorted(mv.stats.batches) == [1]

    run(body)


@pytest.mark.parametrize(
    "arrays",
    [
        [np.full((i % 3 + 1, 4), float(i), np.float32) for i in range(5)],  # bytes joined
        [np.arange(8, dtype=np.int64).reshape(4, 2).T, np.zeros((1, 4), np.int64)],  # a transpose
        [np.arange(12, dtype=np.float64).reshape(2, 6)[:, ::2], np.ones((1, 3))],  # strided
        [np.array([[b"a", b"bc"]], dtype=object), np.array([[b"", b"d"]], dtype=object)],
        [np.zeros((0, 3), np.float32), np.ones((2, 3), np.float32), np.zeros((0, 3), np.float32)],
    ],
)
def test_a_batch_is_stacked_as_concatenate_stacks_it_and_is_writable(
    arrays: list[np.ndarray],
) -> None:
    rows = sum(len(a) for a in arrays)
    stacked = _stack(arrays, rows)
    expected = np.concatenate(arrays)
    assert stacked.dtype == expected.dtype
    assert stacked.shape == expected.shape
    assert stacked.tolist() == expected.tolist()
    assert stacked.flags.writeable  # a model may work in place on its inputs
