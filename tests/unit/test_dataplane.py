"""The data plane over in-memory models: invocation styles, validation, errors."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from typing import Any

import numpy as np
import pytest

from rosettaserve import Model
from rosettaserve.core.dataplane import DataPlane
from rosettaserve.core.errors import InvalidInput, ModelError, ModelNotFound, ModelNotReady
from rosettaserve.core.invoker import Invoker
from rosettaserve.core.registry import ModelVersion, VersionState
from rosettaserve.core.types import InferenceRequest, RequestedOutput, Tensor, TensorSpec

SPEC_IN = [TensorSpec("X", "INT32", (-1,))]
SPEC_OUT = [TensorSpec("Y", "INT32", (-1,)), TensorSpec("Z", "BYTES", (-1,))]


class SyncModel(Model):
    def predict(self, inputs: dict[str, np.ndarray], parameters: dict[str, Any]) -> Any:
        if parameters.get("bad"):
            raise ValueError("x must be positive")
        if parameters.get("crash"):
            raise KeyError("boom")
        return {"Y": inputs["X"] * 2, "Z": [str(v) for v in inputs["X"]]}


class AsyncModel(Model):
    async def predict(self, inputs: dict[str, np.ndarray]) -> Any:
        await asyncio.sleep(0)
        return {"Y": inputs["X"] + 1, "Z": np.array([b"a"] * len(inputs["X"]), dtype=object)}


class GenModel(Model):
    def predict(self, inputs: dict[str, np.ndarray]) -> Iterator[dict[str, Any]]:
        for v in inputs["X"]:
            yield {"Y": np.array([v]), "Z": [b"g"]}


class AsyncGenModel(Model):
    async def predict(self, inputs: dict[str, np.ndarray]) -> AsyncIterator[dict[str, Any]]:
        for v in inputs["X"]:
            yield {"Y": np.array([v * 10]), "Z": [b"ag"]}


class FakeRegistry:
    def __init__(self, versions: list[ModelVersion]) -> None:
        self._versions = versions

    def model_names(self) -> list[str]:
        return ["m"]

    def versions(self, name: str) -> list[ModelVersion] | None:
        return self._versions if name == "m" else None

    def version_for_label(self, name: str, label: str) -> str | None:
        return None


def served(
    model: Model, version: str = "1", state: VersionState = VersionState.READY
) -> ModelVersion:
    return ModelVersion(
        name="m",
        version=version,
        runtime="python",
        state=state,
        model=model,
        invoker=Invoker(model),
        inputs=SPEC_IN,
        outputs=SPEC_OUT,
    )


def plane(*versions: ModelVersion) -> DataPlane:
    dp = DataPlane(FakeRegistry(list(versions)))
    dp.started = True
    return dp


def request(values: list[int], **kw: Any) -> InferenceRequest:
    data = np.array(values, dtype=np.int32)
    return InferenceRequest("m", [Tensor("X", "INT32", data.shape, data)], **kw)


def run(coro: Any) -> Any:
    return asyncio.run(coro)


async def collect(stream: AsyncIterator[Any]) -> list[Any]:
    return [item async for item in stream]


def test_sync_model_outputs_are_typed_from_the_signature() -> None:
    resp = run(plane(served(SyncModel())).infer(request([1, 2], id="")))
    assert resp.id == ""
    y, z = resp.outputs
    assert (y.name, y.datatype, y.data.dtype, y.data.tolist()) == ("Y", "INT32", np.int32, [2, 4])
    assert (z.datatype, z.data.tolist()) == ("BYTES", [b"1", b"2"])


def test_async_model_and_output_filter() -> None:
    req = request([5], outputs=[RequestedOutput("Z")])
    resp = run(plane(served(AsyncModel())).infer(req))
    assert [t.name for t in resp.outputs] == ["Z"]
    assert resp.outputs[0].data.tolist() == [b"a"]


@pytest.mark.parametrize("model", [GenModel(), AsyncGenModel()])
def test_generators_stream_one_response_per_yield(model: Model) -> None:
    responses = run(collect(plane(served(model)).infer_stream(request([1, 2, 3]))))
    factor = 10 if isinstance(model, AsyncGenModel) else 1
    assert [r.outputs[0].data.tolist() for r in responses] == [[factor], [2 * factor], [3 * factor]]


def test_generator_on_unary_infer_is_refused() -> None:
    with pytest.raises(InvalidInput, match="streams its responses"):
        run(plane(served(GenModel())).infer(request([1])))


def test_value_error_is_bad_input_and_other_errors_are_model_errors() -> None:
    dp = plane(served(SyncModel()))
    with pytest.raises(InvalidInput, match="x must be positive"):
        run(dp.infer(request([1], parameters={"bad": True})))
    with pytest.raises(ModelError, match="KeyError"):
        run(dp.infer(request([1], parameters={"crash": True})))


def test_no_version_means_highest_ready_version() -> None:
    dp = plane(
        served(SyncModel(), "1"),
        served(AsyncModel(), "2"),
        served(SyncModel(), "3", VersionState.LOADING),
    )
    assert run(dp.infer(request([1]))).model_version == "2"
    with pytest.raises(ModelNotReady, match="version 3 is not ready"):
        run(dp.infer(request([1], model_version="3")))
    with pytest.raises(ModelNotFound, match="no version 9"):
        run(dp.infer(request([1], model_version="9")))


def test_validation_against_the_signature() -> None:
    dp = plane(served(SyncModel()))
    cases = [
        (InferenceRequest("m", []), "missing"),
        (request([1], outputs=[RequestedOutput("Q")]), "unexpected output 'Q'"),
        (request([1], outputs=[RequestedOutput("Y"), RequestedOutput("Y")]), "more than once"),
        (
            InferenceRequest("m", [Tensor("X", "FP32", (1,), np.zeros(1, np.float32))]),
            "expects INT32",
        ),
        (
            InferenceRequest("m", [Tensor("X", "INT32", (1, 1), np.zeros((1, 1), np.int32))]),
            "has shape [1, 1]",
        ),
    ]
    for req, message in cases:
        with pytest.raises(InvalidInput, match=message.replace("[", r"\[").replace("]", r"\]")):
            run(dp.infer(req))


def test_a_replaced_signature_is_the_one_requests_are_checked_against() -> None:
    """The per-version index of inputs and outputs by name follows a reload's new lists."""
    mv = served(SyncModel())
    dp = plane(mv)
    assert run(dp.infer(request([1]))).outputs[0].datatype == "INT32"
    mv.inputs = [TensorSpec("X", "INT64", (-1,))]
    with pytest.raises(InvalidInput, match="expects INT64"):
        run(dp.infer(request([1])))
    mv.inputs = SPEC_IN
    mv.outputs = [TensorSpec("Y", "INT64", (-1,)), SPEC_OUT[1]]
    assert run(dp.infer(request([1]))).outputs[0].datatype == "INT64"


def test_unknown_model_is_not_found() -> None:
    with pytest.raises(ModelNotFound, match="unknown model 'nope'"):
        plane().resolve("nope")


def test_model_returning_a_non_dict_is_a_model_error() -> None:
    class Bad(Model):
        def predict(self, inputs: dict[str, np.ndarray]) -> Any:
            return [1, 2]

    with pytest.raises(ModelError, match="must return a dict"):
        run(plane(served(Bad())).infer(request([1])))
