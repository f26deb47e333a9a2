"""Predict requests and responses: the fact sheet's row (§4.3), columnar (§4.4), top-level (§4)
and response (§5) rules, with TF's error texts."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import orjson
import pytest

from rosettaserve.core.errors import InvalidInput
from rosettaserve.core.types import Tensor, TensorSpec
from rosettaserve.protocols.tfserving.convert import (
    COLUMNAR,
    ROW,
    encode_predict,
    predict_inputs,
    signature_name,
)
from rosettaserve.protocols.tfserving.jsonio import load

X = {"x": TensorSpec("x", "FP32", (-1,))}
MULTI = {
    "tag": TensorSpec("tag", "BYTES", (-1,)),
    "signal": TensorSpec("signal", "FP32", (-1, -1)),
    "sensor": TensorSpec("sensor", "INT32", (-1, -1, -1)),
}
ROW_A = {"tag": "foo", "signal": [1, 2, 3, 4, 5], "sensor": [[1, 2], [3, 4]]}
ROW_B = {"tag": "bar", "signal": [3, 4, 1, 2, 5], "sensor": [[4, 5], [6, 8]]}


def read(doc: Any, specs: dict[str, TensorSpec] = X) -> tuple[str, dict[str, list[Any]]]:
    fmt, arrays = predict_inputs(load(json.dumps(doc).encode()), specs)
    return fmt, {k: v.tolist() for k, v in arrays.items()}


def fails(doc: Any, specs: dict[str, TensorSpec] = X) -> str:
    with pytest.raises(InvalidInput) as err:
        predict_inputs(load(json.dumps(doc).encode()), specs)
    return err.value.message


# -- top level --------------------------------------------------------------------------------


def test_top_level_errors() -> None:
    both = {"instances": [1], "inputs": [1]}
    assert fails(both) == (
        'JSON Value: {"instances":[1],"inputs":[1]} Not formatted correctly expecting only one '
        "of 'inputs' or 'instances' keys to exist "
    )
    assert fails({"other": 1}) == "Missing 'inputs' or 'instances' key"
    assert fails({"instances": 5}) == (
        "JSON Value: {\"instances\":5} Expecting 'instances' to be an list/array"
    )
    assert (
        fails({"instances": []}) == "JSON Value: {\"instances\":[]} No values in 'instances' array"
    )


def test_signature_name_must_be_a_string() -> None:
    assert signature_name({}) == ""
    assert signature_name({"signature_name": "s"}) == "s"
    with pytest.raises(InvalidInput) as err:
        signature_name({"signature_name": 1, "inputs": []})
    assert err.value.message == (
        'JSON Value: {"signature_name":1,"inputs":[]} not formatted correctly. '
        "'signature_name' key must be a string value."
    )


# -- row format -------------------------------------------------------------------------------


def test_row_format_one_input_values_or_objects() -> None:
    assert read({"instances": [1.0, 2.0, 5.0]}) == (ROW, {"x": [1.0, 2.0, 5.0]})
    assert read({"instances": [{"x": 1.0}, {"x": 2.0}]}) == (ROW, {"x": [1.0, 2.0]})
    assert read({"instances": [[1, 2], [3, 4]]}) == (ROW, {"x": [[1.0, 2.0], [3.0, 4.0]]})
    assert read({"instances": [[], []]}) == (ROW, {"x": [[], []]})


def test_row_format_b64_values_with_one_bytes_input() -> None:
    specs = {"img": TensorSpec("img", "BYTES", (-1,))}
    doc = {"instances": [{"b64": "aGk="}, "plain"]}
    assert read(doc, specs) == (ROW, {"img": [b"hi", b"plain"]})


def test_row_format_several_inputs() -> None:
    fmt, arrays = read({"instances": [ROW_A, ROW_B]}, MULTI)
    assert fmt == ROW
    assert arrays == {
        "tag": [b"foo", b"bar"],
        "signal": [[1.0, 2.0, 3.0, 4.0, 5.0], [3.0, 4.0, 1.0, 2.0, 5.0]],
        "sensor": [[[1, 2], [3, 4]], [[4, 5], [6, 8]]],
    }


@pytest.mark.parametrize(
    ("instances", "message"),
    [
        (["foo"], "instances is a plain list, but expecting list of objects as multiple input "
         "tensors required as per tensorinfo_map"),
        ([ROW_A, [1]], "Expecting object but got list at item 1 of input list"),
        ([ROW_A, 5], "Expecting object but got list at item 1 of input list"),
        ([ROW_A, {**ROW_B, "extra": 1}], "Failed to process element: 1 key: extra of 'instances' "
         "list. Error: INVALID_ARGUMENT: JSON object: does not have named input: extra"),
        ([ROW_A, {"tag": "bar"}], "Failed to process element: 1 of 'instances' list. JSON object: "
         '{"tag":"bar"} keys must be equal to: sensor,signal,tag'),
        ([ROW_A, {**ROW_B, "signal": [1, 2]}], "Failed to process element: 1 key: signal of "
         "'instances' list. Error: INVALID_ARGUMENT: Expecting tensor size: 5 but got: 2"),
        ([ROW_A, {**ROW_B, "sensor": [[1, 2, 3, 4]]}], "Failed to process element: 1 key: sensor "
         "of 'instances' list. Error: INVALID_ARGUMENT: Expecting shape [2,2] but got: [1,4]"),
        ([ROW_A, {**ROW_B, "tag": 5}], "Failed to process element: 1 key: tag of 'instances' list. "
         "Error: INVALID_ARGUMENT: JSON Value: 5 Type: Number is not of expected type: string"),
    ],
)  # fmt: skip
def test_row_format_several_inputs_errors(instances: list[Any], message: str) -> None:
    assert fails({"instances": instances}, MULTI) == message


@pytest.mark.parametrize(
    ("instances", "message"),
    [
        ([1.0, {"x": 2.0}], "Expecting value/list but got object at item 1 of input list"),
        ([{"x": 1.0}, 2.0], "Expecting object but got list at item 1 of input list"),
        ([{"y": 1.0}], "Failed to process element: 0 key: y of 'instances' list. Error: "
         "INVALID_ARGUMENT: JSON object: does not have named input: y"),
        ([[1, 2], [3]], "Failed to process element: 1 of 'instances' list. Error: "
         "INVALID_ARGUMENT: Expecting tensor size: 2 but got: 1"),
        ([[[1, 2]], [[3], [4]]], "Failed to process element: 1 of 'instances' list. Error: "
         "INVALID_ARGUMENT: Expecting shape [1,2] but got: [2,1]"),
        ([1, [2]], "Failed to process element: 1 of 'instances' list. Error: "
         "INVALID_ARGUMENT: Expecting shape [] but got: [1]"),
        ([[1, 2], [[3], 4]], "Failed to process element: 1 of 'instances' list. Error: "
         "INVALID_ARGUMENT: JSON Value: 4 found at incorrect level: 2 in the JSON DOM. "
         "Expected at level: 2"),
        ([[1, [2]]], "Failed to process element: 0 of 'instances' list. Error: "
         "INVALID_ARGUMENT: Encountered list at unexpected level: 1 expected < 1"),
        ([1, "2"], "Failed to process element: 1 of 'instances' list. Error: "
         'INVALID_ARGUMENT: JSON Value: "2" Type: String is not of expected type: float'),
    ],
)  # fmt: skip
def test_row_format_one_input_errors(instances: list[Any], message: str) -> None:
    assert fails({"instances": instances}) == message


def test_row_format_wraps_a_501_in_a_400() -> None:
    specs = {"h": TensorSpec("h", "FP16", (-1,))}
    message = fails({"instances": [1.5]}, specs)
    assert message == (
        "Failed to process element: 0 of 'instances' list. Error: UNIMPLEMENTED: "
        "Conversion of JSON Value: 1.5 to type: half"
    )


# -- columnar format --------------------------------------------------------------------------


def test_columnar_format() -> None:
    assert read({"inputs": [1.0, 2.0]}) == (COLUMNAR, {"x": [1.0, 2.0]})
    assert read({"inputs": 5}) == (COLUMNAR, {"x": 5.0})  # the value is the tensor: rank 0
    assert read({"inputs": []}) == (COLUMNAR, {"x": []})  # allowed, unlike empty instances
    assert read({"inputs": {"x": [3.0], "ignored": "extra keys"}}) == (COLUMNAR, {"x": [3.0]})
    b64 = {"img": TensorSpec("img", "BYTES", (-1,))}
    assert read({"inputs": {"b64": "aGk="}}, b64) == (COLUMNAR, {"img": b"hi"})
    cols = {"tag": ["a", "b"], "signal": [[1]], "sensor": [[[1]], [[2]], [[3]]]}
    assert read({"inputs": cols}, MULTI)[1]["sensor"] == [[[1]], [[2]], [[3]]]  # any batch each


def test_columnar_format_errors() -> None:
    assert fails({"inputs": [1]}, MULTI) == (
        "inputs is a plain value/list, but expecting an object as multiple input tensors "
        "required as per tensorinfo_map"
    )
    assert fails({"inputs": {"tag": ["a"]}}, MULTI) == (
        "Missing named input: signal in 'inputs' object."
    )
    assert fails({"inputs": {"y": [1]}}) == "Missing named input: x in 'inputs' object."
    assert fails({"inputs": {"x": [1, [2]]}}) == (
        "Encountered list at unexpected level: 1 expected < 1"
    )


# -- responses --------------------------------------------------------------------------------


def tensor(data: Any, datatype: str = "FP32") -> Tensor:
    arr = np.asarray(data, dtype=np.float32 if datatype == "FP32" else None)
    return Tensor("t", datatype, arr.shape, arr)


def test_row_responses() -> None:
    one = encode_predict(ROW, {"y": tensor([3.0, 3.5, 4.0])})
    assert one == b'{"predictions":[3.0,3.5,4.0]}'
    two = encode_predict(ROW, {"a": tensor([[1, 2], [3, 4]]), "b": tensor([5, 6], "INT64")})
    assert orjson.loads(two) == {
        "predictions": [{"a": [1.0, 2.0], "b": 5}, {"a": [3.0, 4.0], "b": 6}]
    }
    assert encode_predict(ROW, {"y": tensor(np.empty((0, 2)))}) == b'{"predictions":[]}'


def test_row_response_errors() -> None:
    with pytest.raises(InvalidInput, match=r"^Tensor name: s has no shape information $"):
        encode_predict(ROW, {"y": tensor([1.0]), "s": tensor(2.0)})
    with pytest.raises(InvalidInput) as err:
        encode_predict(ROW, {"y": tensor([1.0, 2.0]), "z": tensor([1.0, 2.0, 3.0])})
    assert err.value.message == "Tensor name: z has inconsistent batch size: 3 expecting: 2"
    with pytest.raises(InvalidInput, match=r"^Cannot convert empty tensor map to JSON$"):
        encode_predict(ROW, {})


def test_columnar_responses() -> None:
    assert encode_predict(COLUMNAR, {"y": tensor([3.5, 4.0])}) == b'{"outputs":[3.5,4.0]}'
    assert encode_predict(COLUMNAR, {"y": tensor(2.0)}) == b'{"outputs":2.0}'
    both = encode_predict(COLUMNAR, {"s": tensor(2.0), "y": tensor([1.0, 2.0, 3.0])})
    assert both == b'{"outputs":{"s":2.0,"y":[1.0,2.0,3.0]}}'  # no batch check in columnar


def test_non_finite_and_bytes_outputs() -> None:
    out = encode_predict(COLUMNAR, {"y": tensor([np.nan, np.inf, -np.inf, 1e-7])})
    assert out == b'{"outputs":[NaN,Infinity,-Infinity,1e-07]}'
    raw = np.empty(2, dtype=object)
    raw[:] = [b"\x00\x01", b"ok"]
    out = encode_predict(ROW, {"img_bytes": Tensor("t", "BYTES", (2,), raw), "n": tensor([1, 2])})
    assert orjson.loads(out)["predictions"][0] == {"img_bytes": {"b64": "AAE="}, "n": 1.0}


def test_an_object_with_b64_and_more_keys_is_a_named_input_object() -> None:
    specs = {"img": TensorSpec("img", "BYTES", (-1,))}
    message = fails({"instances": [{"b64": "aGk=", "other": 1}]}, specs)
    assert message == (
        "Failed to process element: 0 key: b64 of 'instances' list. Error: INVALID_ARGUMENT: "
        "JSON object: does not have named input: b64"
    )
    assert read({"instances": [{"img": {"b64": "aGk="}}]}, specs) == (ROW, {"img": [b"hi"]})
