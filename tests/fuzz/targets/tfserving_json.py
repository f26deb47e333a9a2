"""TF Serving's REST request bodies (``protocols/tfserving/jsonio.py``, ``convert.py``) and its
float text (``floats.py``).

Properties: only the project's errors (4xx) escape reading a body and turning it into the
signature's input arrays; where orjson reads the body, the TF reader gives the same document;
and every float array read writes back (``floats.array_json``, TF's text) to text that reads
back to the same values, NaN and infinities included.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import orjson

from rosettaserve.core.types import TensorSpec
from rosettaserve.protocols.tfserving import convert, floats, jsonio, tensors
from tests.fuzz.targets.refusals import assert_a_refusal

SPECS = {
    "x": TensorSpec("x", "FP32", (-1,)),
    "d": TensorSpec("d", "FP64", (-1, -1)),
    "n": TensorSpec("n", "INT64", (-1,)),
    "s": TensorSpec("s", "BYTES", (-1,)),
    "b": TensorSpec("b", "BOOL", (-1,)),
}
ONE = {"x": SPECS["x"]}  # a single input: bare values, as half_plus_two takes them


def same(a: Any, b: Any) -> bool:
    """Equal JSON documents, NaN equal to NaN."""
    if isinstance(a, float) and isinstance(b, float):
        return (math.isnan(a) and math.isnan(b)) or a == b
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    return type(a) is type(b) and a == b


def round_trip(array: np.ndarray, datatype: str) -> None:
    text = floats.array_json(array)
    back = tensors.to_array(jsonio.load(text).doc, datatype)
    assert back.shape == array.shape, (back.shape, array.shape)
    assert np.array_equal(back, array, equal_nan=True), (array, text, back)
    signed = ~np.isnan(array)  # TF writes NaN without a sign
    assert np.array_equal(np.signbit(back[signed]), np.signbit(array[signed])), (array, text)


def check(data: bytes) -> None:
    try:
        body = jsonio.load(data)
    except Exception as exc:
        assert_a_refusal(exc)
        return
    try:
        expected = orjson.loads(data)
    except orjson.JSONDecodeError:
        pass
    else:
        assert same(body.doc, expected), (body.doc, expected)
    if not isinstance(body.doc, dict):
        return
    for specs in (SPECS, ONE):
        try:
            _, arrays = convert.predict_inputs(body, specs)
        except Exception as exc:
            assert_a_refusal(exc)
            continue
        for alias, array in arrays.items():
            if array.dtype.kind == "f" and array.ndim >= 1 and array.size:
                round_trip(array, specs[alias].datatype)
