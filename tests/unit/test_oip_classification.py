"""The classification extension's ranking and text, on the core types alone."""

from __future__ import annotations

import numpy as np
import pytest

from rosettaserve.core.errors import InvalidInput
from rosettaserve.core.registry import ModelVersion
from rosettaserve.core.types import InferenceRequest, InferenceResponse, RequestedOutput, Tensor
from rosettaserve.protocols.oip import classification as cls


def classify(data: np.ndarray, datatype: str, count: object, batch: int = 0) -> Tensor:
    mv = ModelVersion("m", "1", "python", max_batch_size=batch, class_labels=["a", "b"])
    request = InferenceRequest("m", [], outputs=[RequestedOutput("OUT", {"classification": count})])
    cls.note_outputs(request)
    response = InferenceResponse("m", "1", [Tensor("OUT", datatype, data.shape, data)])
    cls.classify(mv, request, response)
    return response.outputs[0]


def test_equal_scores_rank_the_lower_index_first_and_unsigned_values_sort() -> None:
    out = classify(np.array([5, 9, 9, 2**64 - 1], dtype=np.uint64), "UINT64", 4)
    assert out.data.tolist() == [
        f"{2**64 - 1}:3".encode(),
        b"9:1:b",
        b"9:2",
        b"5:0:a",
    ]
    assert (out.datatype, out.shape) == ("BYTES", (4,))


def test_a_batched_model_ranks_each_row() -> None:
    out = classify(np.array([[1.0, 2.0], [3.0, 0.5]], dtype=np.float64), "FP64", 1, batch=4)
    assert out.shape == (2, 1)
    assert out.data.tolist() == [[b"2.000000:1:b"], [b"3.000000:0:a"]]


def test_zero_is_no_classification() -> None:
    data = np.array([1, 2], dtype=np.int32)
    assert classify(data, "INT32", 0).data is data


@pytest.mark.parametrize(("count", "datatype"), [(-1, "INT32"), (True, "INT32"), (2, "BOOL")])
def test_refused(count: object, datatype: str) -> None:
    with pytest.raises(InvalidInput):
        classify(np.array([1, 0]), datatype, count)
