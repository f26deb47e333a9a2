"""core/outputs.py: a model's answer held to the outputs its version declares."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest

from rosettaserve import Model
from rosettaserve.core.dataplane import DataPlane
from rosettaserve.core.errors import ModelError
from rosettaserve.core.invoker import Invoker
from rosettaserve.core.registry import ModelVersion, VersionState
from rosettaserve.core.types import (
    InferenceRequest,
    InferenceResponse,
    RequestedOutput,
    Tensor,
    TensorSpec,
)
from tests.unit.metrics_support import OneModel

X = [TensorSpec("x", "FP32", (-1,))]
Y = [TensorSpec("y", "FP32", (-1,))]
Answer = Callable[[np.ndarray], Any]


class Returns(Model):
    """Answers what ``answer`` makes of its input ``x``."""

    def __init__(self, answer: Answer) -> None:
        super().__init__(name="m")
        self.answer = answer

    def predict(self, inputs: dict[str, np.ndarray]) -> Any:
        return self.answer(inputs["x"])


def plane(
    model: Model,
    outputs: list[TensorSpec] = Y,
    inputs: list[TensorSpec] = X,
    max_batch_size: int = 0,
) -> DataPlane:
    mv = ModelVersion(
        name="m",
        version="3",
        runtime="python",
        state=VersionState.READY,
        model=model,
        invoker=Invoker(model),
        inputs=inputs,
        outputs=outputs,
        max_batch_size=max_batch_size,
    )
    dp = DataPlane(OneModel(mv))
    dp.started = True
    return dp


def request(shape: tuple[int, ...] = (2,), **kw: Any) -> InferenceRequest:
    data = np.arange(np.prod(shape), dtype=np.float32).reshape(shape)
    return InferenceRequest("m", [Tensor("x", "FP32", shape, data)], **kw)


def answer(answer: Answer, declared: list[TensorSpec] = Y, **kw: Any) -> InferenceResponse:
    result: InferenceResponse = asyncio.run(plane(Returns(answer), declared).infer(request(**kw)))
    return result


def refused(answer_: Answer, declared: list[TensorSpec] = Y, **kw: Any) -> str:
    with pytest.raises(ModelError) as info:
        answer(answer_, declared, **kw)
    assert info.value.http_status == 500
    return info.value.message


# -- what is refused, and what the 500 says -----------------------------------------------------

WRONG: list[tuple[str, Answer, str]] = [
    ("none", lambda x: {"y": None}, "returned None for output 'y'"),
    (
        "another name",
        lambda x: {"z": x},
        "did not return its declared output 'y' (it returned ['z'])",
    ),
    (
        "complex",
        lambda x: {"y": x.astype(np.complex64) + 1j},
        "declared FP32, that holds complex numbers (their imaginary part would be lost)",
    ),
    (
        "rank 3",
        lambda x: {"y": np.zeros((2, 2, 2), np.float32)},
        "output 'y' with shape [2, 2, 2], but declares [-1]",
    ),
    ("a scalar", lambda x: {"y": 1.0}, "output 'y' with shape [], but declares [-1]"),
    (
        "objects",
        lambda x: {"y": np.array([1.0, None])},
        "output 'y', declared FP32, that holds Python objects",
    ),
    ("ragged", lambda x: {"y": [[1.0], [1.0, 2.0]]}, "output 'y' as list, which is no array"),
    ("text", lambda x: {"y": np.array(["1", "2"])}, "declared FP32, that holds text"),
    ("overflow", lambda x: {"y": np.array([1e300, 0.0])}, "float64 values beyond FP32's range"),
]


@pytest.mark.parametrize(("case", "wrong", "why"), WRONG, ids=[w[0] for w in WRONG])
def test_an_answer_that_does_not_fit_is_a_500_naming_model_output_and_why(
    case: str, wrong: Answer, why: str
) -> None:
    message = refused(wrong)
    assert message.startswith("model 'm' version 3 ")
    assert why in message


def test_a_fixed_dimension_is_checked() -> None:
    out = [TensorSpec("y", "FP32", (-1, 3))]
    assert answer(lambda x: {"y": np.zeros((2, 3), np.float32)}, out).outputs[0].shape == (2, 3)
    message = refused(lambda x: {"y": np.zeros((2, 4), np.float32)}, out)
    assert "with shape [2, 4], but declares [-1, 3]" in message


def test_with_a_batch_dimension_an_output_has_the_requests_rows() -> None:
    spec = [TensorSpec("x", "FP32", (-1, 2))]
    out = [TensorSpec("y", "FP32", (-1, 2))]
    dp = plane(Returns(lambda x: {"y": x[:1]}), out, spec, max_batch_size=8)
    with pytest.raises(
        ModelError, match=re.escape("with 1 rows, but the request has a batch of 3")
    ):
        asyncio.run(dp.infer(request((3, 2))))
    fine = plane(Returns(lambda x: {"y": x * 2}), out, spec, max_batch_size=8)
    assert asyncio.run(fine.infer(request((3, 2)))).outputs[0].shape == (3, 2)


def test_a_model_that_sets_an_unknown_datatype_in_load_has_its_answers_refused() -> None:
    message = refused(lambda x: {"y": x}, [TensorSpec("y", "FLOAT", (-1,))])
    assert "declares output 'y' as 'FLOAT', which is no datatype" in message


# -- BYTES ------------------------------------------------------------------------------------

TEXT = [TensorSpec("t", "BYTES", (-1,))]


def test_bytes_outputs_take_bytes_and_str() -> None:
    for value in (
        [b"a", "b"],
        np.array(["a", "b"]),
        np.array([b"a", b"b"]),
        np.array([b"a", "b"], object),
    ):
        tensor = answer(lambda x, v=value: {"t": v}, TEXT).outputs[0]
        assert (tensor.datatype, tensor.data.tolist()) == ("BYTES", [b"a", b"b"])


@pytest.mark.parametrize(
    ("value", "why"),
    [
        (np.array([1, 2]), "holds int64 values, not bytes or str"),
        (np.array([b"a", None], object), "holds a NoneType element, not bytes or str"),
        (np.array([b"a", 3], object), "holds a int element, not bytes or str"),
    ],
    ids=["numbers", "None", "an int among bytes"],
)
def test_bytes_outputs_refuse_other_values(value: Any, why: str) -> None:
    assert why in refused(lambda x: {"t": value}, TEXT)


# -- what is served ---------------------------------------------------------------------------


def test_values_that_fit_are_served_as_the_declared_datatype() -> None:
    out = [TensorSpec("y", "FP32", (-1,)), TensorSpec("i", "INT32", (-1,))]
    resp = answer(lambda x: {"y": [0.5, 1.5], "i": np.array([7, -7], np.int64)}, out)
    assert [(t.name, t.datatype, t.data.dtype) for t in resp.outputs] == [
        ("y", "FP32", np.float32),
        ("i", "INT32", np.int32),
    ]
    assert [t.data.tolist() for t in resp.outputs] == [[0.5, 1.5], [7, -7]]
    assert "INT32 cannot hold exactly (4294967296)" in refused(
        lambda x: {"y": x, "i": np.array([2**32], np.int64)}, out
    )


def test_only_declared_outputs_are_served_in_declared_order() -> None:
    out = [TensorSpec("a", "FP32", (-1,)), TensorSpec("b", "FP32", (-1,))]
    resp = answer(lambda x: {"debug": x, "b": x + 1, "a": x}, out)
    assert [t.name for t in resp.outputs] == ["a", "b"]


def test_requested_outputs_are_the_ones_served_and_checked() -> None:
    out = [TensorSpec("a", "FP32", (-1,)), TensorSpec("b", "FP32", (-1,))]
    resp = answer(lambda x: {"a": x, "b": None}, out, outputs=[RequestedOutput("a")])
    assert [t.name for t in resp.outputs] == ["a"]
    message = refused(lambda x: {"a": x}, out, outputs=[RequestedOutput("b")])
    assert "did not return its declared output 'b'" in message


def test_a_version_without_declared_outputs_is_served_what_it_returns() -> None:
    resp = answer(lambda x: {"z": x.astype(np.int16), "w": ["s"]}, declared=[])
    assert [(t.name, t.datatype, t.shape) for t in resp.outputs] == [
        ("z", "INT16", (2,)),
        ("w", "BYTES", (1,)),
    ]


class Stream(Model):
    def predict(self, inputs: dict[str, np.ndarray]) -> Iterator[dict[str, Any]]:
        yield {"y": inputs["x"]}
        yield {"y": None}


def test_every_item_of_a_stream_is_checked() -> None:
    responses: list[InferenceResponse] = []

    async def first_then_fail() -> None:
        async for item in plane(Stream()).infer_stream(request()):
            responses.append(item)

    with pytest.raises(ModelError, match="returned None for output 'y'"):
        asyncio.run(first_then_fail())
    assert [r.outputs[0].data.tolist() for r in responses] == [[0.0, 1.0]]
