"""OIP REST JSON answers and NaN/Infinity: a small float output is written first and the answer
searched for ``null`` (protocols/oip/convert.py ``SEARCHED_VALUES``), a larger one tested first;
either way the tokens are what the answer holds, and an answer with ``null`` elsewhere (a
parameter, a string) keeps it."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from rosettaserve.core import json_nonfinite
from rosettaserve.core.types import InferenceRequest, InferenceResponse, RequestedOutput, Tensor
from rosettaserve.protocols.oip.convert import SEARCHED_VALUES, encode_infer


def answer(*outputs: Tensor, parameters: dict[str, object] | None = None) -> bytes:
    response = InferenceResponse("m", "1", list(outputs), parameters=parameters)
    header, blobs, length = encode_infer(response, InferenceRequest("m", []))
    assert blobs == []
    assert length is None
    return header


def floats(size: int, dtype: type = np.float32, special: float | None = None) -> Tensor:
    data = np.linspace(-1.0, 1.0, size, dtype=dtype)
    if special is not None:
        data[size // 2] = special
    name = "FP32" if dtype == np.float32 else "FP64"
    return Tensor("out", name, (size,), data)


@pytest.mark.parametrize("size", [1, 4, SEARCHED_VALUES, SEARCHED_VALUES + 1, 5000])
@pytest.mark.parametrize("special", [math.nan, math.inf, -math.inf])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_a_non_finite_value_is_its_token_at_every_size(
    size: int, special: float, dtype: type
) -> None:
    text = answer(floats(size, dtype, special))
    assert b"null" not in text
    data = json.loads(text)["outputs"][0]["data"]  # Python's json reads the tokens
    assert len(data) == size
    got = data[size // 2]
    assert math.isnan(got) if math.isnan(special) else got == special


def test_finite_values_are_written_as_they_are() -> None:
    data = np.array([0.5, -1.5, 2.0, 0.25], dtype=np.float32)
    text = answer(Tensor("out", "FP32", (4,), data))
    assert json.loads(text)["outputs"][0]["data"] == [0.5, -1.5, 2.0, 0.25]


def test_null_elsewhere_in_the_answer_stays_null() -> None:
    """A parameter that is null, beside a small output with and without a NaN."""
    for special in (None, math.nan):
        text = answer(floats(4, special=special), parameters={"note": None, "s": "null"})
        doc = json.loads(text)
        assert doc["parameters"] == {"note": None, "s": "null"}
        assert (b"NaN" in text) == (special is not None)


def test_two_small_outputs_one_with_an_infinity() -> None:
    first, second = floats(3), floats(3, special=math.inf)
    second.name = "other"
    doc = json.loads(answer(first, second))
    assert doc["outputs"][0]["data"] == json.loads(answer(floats(3)))["outputs"][0]["data"]
    assert doc["outputs"][1]["data"][1] == math.inf


def test_an_integer_output_is_not_searched() -> None:
    text = answer(Tensor("out", "INT32", (3,), np.array([1, 2, 3], dtype=np.int32)))
    assert json.loads(text)["outputs"][0]["data"] == [1, 2, 3]


def mixed_outputs() -> list[Tensor]:
    """Large FP32 outputs (written into the answer by json_floats) around a small one, an
    FP64 one, a binary one and one with a NUL in its name (the mark's byte, escaped by orjson)."""
    rng = np.random.default_rng(29)
    big = rng.standard_normal(3000).astype(np.float32)
    big[7] = math.nan
    return [
        Tensor("a", "FP32", (3000,), big),
        Tensor("b", "FP32", (2, 4), np.array([[0.1, -0.0, 3e38, 1e-45]] * 2, dtype=np.float32)),
        Tensor("c\x00", "FP32", (1, 500), -big[:500].reshape(1, 500)),
        Tensor("d", "FP64", (100,), np.linspace(0.0, 1.0, 100)),
        Tensor("e", "FP32", (100,), big[:100]),
        Tensor("f", "FP32", (70,), big[:70], parameters={"binary_data": True}),
    ]


@pytest.mark.parametrize("count", [1, 2, 6])
def test_fp32_outputs_written_into_the_answer_as_orjson_would(
    count: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same answer, byte for byte, as with orjson writing every array (where json_floats
    is not built), with one spliced output or several, the tokens included."""
    request = InferenceRequest("m", [])
    request.outputs = [
        RequestedOutput(t.name, {"binary_data": t.name == "f"}) for t in mixed_outputs()
    ]
    response = InferenceResponse("m", "1", mixed_outputs()[:count])
    spliced = encode_infer(response, request)
    assert json_nonfinite.json_floats is not None  # built: the answers above came from it
    monkeypatch.setattr(json_nonfinite, "json_floats", None)
    plain = encode_infer(InferenceResponse("m", "1", mixed_outputs()[:count]), request)
    assert spliced[0] == plain[0]
    assert spliced[2] == plain[2]
    assert [bytes(b) for b in spliced[1]] == [bytes(b) for b in plain[1]]
    doc = json.loads(spliced[0][: spliced[2]] if spliced[2] else spliced[0])
    first = np.array(doc["outputs"][0]["data"], dtype=np.float32)
    assert np.array_equal(first, mixed_outputs()[0].data, equal_nan=True)
