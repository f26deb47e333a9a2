"""Every way a request leaves gives its key's count back (core/queue_limit.py): answered,
failed, cancelled (the client went away), timed out, streamed to its end or left mid-stream,
through the data plane (tensor requests) and the generation plane (LLM requests). A request
refused at the limit was never counted.

The models hold their calls on an event the test sets: what is in flight is decided by the
test, not by timing."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import numpy as np
import pytest

from rosettaserve import Model
from rosettaserve.core.call import PROTOCOL, TIMEOUT_US
from rosettaserve.core.dataplane import DataPlane, Limits
from rosettaserve.core.errors import (
    DeadlineExceeded,
    InvalidInput,
    ModelError,
    Overloaded,
)
from rosettaserve.core.generate import GenerateRequest, GeneratorInfo, SamplingParams
from rosettaserve.core.generation_plane import GenerationPlane, frames
from rosettaserve.core.invoker import Invoker
from rosettaserve.core.registry import ModelVersion, VersionState
from rosettaserve.core.share import SHARE, Share
from rosettaserve.core.types import InferenceRequest, Tensor, TensorSpec
from rosettaserve.protocols.vllm.rest import CumulativeFramer
from tests.unit.metrics_support import OneModel
from tests.unit.test_generation_plane import Endless
from tests.unit.test_scheduling_batcher import until

A, B = Share("a", 1.0, 0), Share("b", 1.0, 0)


class Held(Model):
    """Y = X; each call waits for ``gate``; ``fail`` set: it raises instead."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.gate = asyncio.Event()
        self.fail = False
        self.calls = 0

    async def predict(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        self.calls += 1
        await self.gate.wait()
        if self.fail:
            raise KeyError("broken on purpose")
        return {"Y": inputs["X"]}


class Streaming(Model):
    """Yields X, then waits for ``gate``, then yields X again."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.gate = asyncio.Event()

    async def predict(self, inputs: dict[str, np.ndarray]) -> AsyncIterator[dict[str, Any]]:
        yield {"Y": inputs["X"]}
        await self.gate.wait()
        yield {"Y": inputs["X"]}


def served(model: Model) -> tuple[DataPlane, ModelVersion]:
    """``model`` unbatched, with a queue limit of 1: every request in flight counts."""
    mv = ModelVersion("m", "1", "python", state=VersionState.READY, model=model)
    mv.inputs, mv.outputs = [TensorSpec("X", "FP32", (-1,))], [TensorSpec("Y", "FP32", (-1,))]
    mv.invoker = Invoker(model)
    dp = DataPlane(OneModel(mv), limits=Limits(max_queue_size=1))
    dp.started = True
    return dp, mv


def request(**context: Any) -> InferenceRequest:
    x = np.ones(2, np.float32)
    return InferenceRequest("m", [Tensor("X", "FP32", (2,), x)], context={PROTOCOL: "t", **context})


def as_key(share: Share, call: Callable[[], Awaitable[Any]]) -> asyncio.Task[Any]:
    """``call`` in a task of its own, on behalf of ``share``'s key (as the key check sets it)."""

    async def keyed() -> Any:
        SHARE.set(share)
        return await call()

    return asyncio.ensure_future(keyed())


async def two_keys_in_flight(dp: DataPlane, mv: ModelVersion) -> list[asyncio.Task[Any]]:
    """a's request and b's (under its share, over the limit of 1) held in the model."""
    tasks = [as_key(A, lambda: dp.infer(request())), as_key(B, lambda: dp.infer(request()))]
    await until(lambda: mv.inflight == 2)
    assert mv.tenants.held == {"a": 1, "b": 1}
    with pytest.raises(Overloaded):  # refused: not counted
        await as_key(A, lambda: dp.infer(request()))
    assert mv.tenants.held == {"a": 1, "b": 1}
    return tasks


def given_back(mv: ModelVersion) -> None:
    assert mv.inflight == 0
    assert mv.tenants.held == {}
    assert mv.tenants.weights == {}


def test_answered() -> None:
    async def body() -> None:
        model = Held()
        dp, mv = served(model)
        tasks = await two_keys_in_flight(dp, mv)
        model.gate.set()
        assert len(await asyncio.gather(*tasks)) == 2
        given_back(mv)

    asyncio.run(body())


def test_failed() -> None:
    async def body() -> None:
        model = Held()
        dp, mv = served(model)
        tasks = await two_keys_in_flight(dp, mv)
        model.fail = True
        model.gate.set()
        for outcome in await asyncio.gather(*tasks, return_exceptions=True):
            assert isinstance(outcome, ModelError)
        given_back(mv)

    asyncio.run(body())


def test_cancelled_when_the_client_goes_away() -> None:
    async def body() -> None:
        dp, mv = served(Held())
        tasks = await two_keys_in_flight(dp, mv)
        for task in tasks:
            task.cancel()
        for outcome in await asyncio.gather(*tasks, return_exceptions=True):
            assert isinstance(outcome, asyncio.CancelledError)
        given_back(mv)

    asyncio.run(body())


def test_timed_out() -> None:
    async def body() -> None:
        dp, mv = served(Held())  # never let go: both wait until their timeout
        tasks = [as_key(s, lambda: dp.infer(request(**{TIMEOUT_US: 1}))) for s in (A, B)]
        for outcome in await asyncio.gather(*tasks, return_exceptions=True):
            assert isinstance(outcome, DeadlineExceeded)
        given_back(mv)

    asyncio.run(body())


def test_streamed_to_its_end_or_left_mid_stream() -> None:
    async def read(dp: DataPlane, leave_early: bool) -> int:
        stream = dp.infer_stream(request())
        seen = 0
        async for _ in stream:
            seen += 1
            if leave_early:
                await stream.aclose()  # type: ignore[attr-defined]  # (an async generator)
                break
        return seen

    async def body() -> None:
        model = Streaming()
        dp, mv = served(model)
        early = as_key(A, lambda: read(dp, True))
        whole = as_key(B, lambda: read(dp, False))
        await until(lambda: mv.tenants.held.get("b") == 1 and early.done())
        assert await early == 1
        assert mv.tenants.held == {"b": 1}
        model.gate.set()
        assert await whole == 2
        given_back(mv)

    asyncio.run(body())


# -- the generation plane ----------------------------------------------------------------------


class Generator:
    """No running sequences counted (every request in flight waits, against a limit of 1);
    ``tokenize`` waits for ``release`` (a long prompt is tokenized on a thread)."""

    info = GeneratorInfo("m", 64, 1, max_num_seqs=0, max_waiting=8, max_stop_sequences=4,
                         dtype="float32", device="cpu", max_prompt_chars=100_000)  # fmt: skip

    def __init__(self) -> None:
        self.release = threading.Event()

    def generate(self, request: Any) -> Endless:
        return Endless(finish_after=2)

    def tokenize(self, text: str, special: bool = True) -> list[int]:
        self.release.wait(30)
        return [1]


def llm_plane() -> tuple[GenerationPlane, ModelVersion, Generator]:
    plane = GenerationPlane(DataPlane(registry=None, limits=Limits(max_queue_size=1)))  # type: ignore[arg-type]
    return plane, ModelVersion("m", "1", "llm", state=VersionState.READY), Generator()


def test_llm_answered_left_mid_stream_and_timed_out() -> None:
    async def body() -> None:
        plane, mv, gen = llm_plane()
        answered = await as_key(A, lambda: plane.generate("t", mv, gen, GenerateRequest()))  # type: ignore[arg-type]
        left = await as_key(B, lambda: plane.generate("t", mv, gen, GenerateRequest()))  # type: ignore[arg-type]
        assert mv.tenants.held == {"a": 1, "b": 1}
        await answered.collect()
        chunks = frames(CumulativeFramer("p", 1), left)
        await chunks.__anext__()
        await chunks.aclose()  # the client went away
        given_back(mv)
        mv.timeout_us = 1
        late = await as_key(A, lambda: plane.generate("t", mv, gen, GenerateRequest()))  # type: ignore[arg-type]
        with pytest.raises(DeadlineExceeded):
            await late.collect()
        given_back(mv)

    asyncio.run(body())


def test_llm_refused_after_admission_or_cancelled_while_tokenized() -> None:
    async def body() -> None:
        plane, mv, gen = llm_plane()
        asks_logprobs = GenerateRequest(sampling=SamplingParams(prompt_logprobs=1))
        with pytest.raises(InvalidInput):  # refused by can_serve, after the limit admitted it
            await as_key(A, lambda: plane.generate("t", mv, gen, asks_logprobs))  # type: ignore[arg-type]
        given_back(mv)
        long = GenerateRequest(prompt="x" * 1000)
        tokenizing = as_key(B, lambda: plane.generate("t", mv, gen, long))  # type: ignore[arg-type]
        await until(lambda: mv.inflight == 1)
        assert mv.tenants.held == {"b": 1}
        tokenizing.cancel()
        with pytest.raises(asyncio.CancelledError):
            await tokenizing
        gen.release.set()
        given_back(mv)

    asyncio.run(body())
