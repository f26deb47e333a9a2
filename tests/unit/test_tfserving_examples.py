"""Classify and regress: the fact sheet's §6 body rules and errors, examples -> named inputs,
and ``results`` as TF writes them."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import orjson
import pytest

from rosettaserve.core.errors import InvalidInput
from rosettaserve.core.types import Tensor, TensorSpec
from rosettaserve.protocols.tfserving.examples import (
    BYTES,
    FLOAT,
    INT64,
    ExamplesRequest,
    classify_results,
    parse,
    regress_results,
    regress_values,
    to_inputs,
)
from rosettaserve.protocols.tfserving.jsonio import load
from rosettaserve.protocols.tfserving.signatures import ClassifyView

X = TensorSpec("x", "FP32", (-1,))
UNEXPECTED = "Feature: f has element with unexpected JSON type: "
KIND = "Unexpected element type in feature: f expecting type: "


def request(doc: Any) -> ExamplesRequest:
    return parse(load(json.dumps(doc).encode()))


def fails(doc: Any) -> str:
    with pytest.raises(InvalidInput) as err:
        request(doc)
    return err.value.message


def test_features_take_their_kind_from_the_json() -> None:
    parsed = request(
        {
            "signature_name": "s",
            "context": {"c": "ctx"},
            "examples": [
                {"i": 3, "b": [True, False], "f": [1.5, 2.0], "s": "x", "img": {"b64": "aGk="}},
                {"e": []},
            ],
        }
    )
    assert parsed.signature_name == "s"
    assert parsed.context["c"].kind == BYTES
    first = parsed.examples[0]
    assert (first["i"].kind, first["i"].values) == (INT64, [3])
    assert (first["b"].kind, first["b"].values) == (INT64, [1, 0])  # bools count as int64
    assert (first["f"].kind, first["f"].values) == (FLOAT, [1.5, 2.0])
    assert (first["img"].kind, first["img"].values) == (BYTES, [b"hi"])
    assert (parsed.examples[1]["e"].kind, parsed.examples[1]["e"].values) == (None, [])


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ({"examples": [[1]]}, "Example must be JSON object but got JSON Array"),
        ({"examples": [1]}, "Example must be JSON object but got JSON Number"),
        ({"context": [], "examples": [{}]}, "Example must be JSON object but got JSON Array"),
        ({"examples": {}},
         "JSON Value: {\"examples\":{}} Expecting 'examples' value to be an list/array"),
        ({"examples": []}, "JSON Value: {\"examples\":[]} 'examples' value is an empty array"),
        ({"signature_name": "r"}, "JSON Value: {\"signature_name\":\"r\"} When method is "
         "classify, key 'examples' is expected and was not found"),
        ({"examples": [{"f": None}]}, f"{UNEXPECTED}Null"),
        ({"examples": [{"f": [[1]]}]}, f"{UNEXPECTED}Array"),
        ({"examples": [{"f": {"a": 1}}]}, f"{UNEXPECTED}Object"),
        ({"examples": [{"f": [1, 1.5]}]}, f"{KIND}int64"),
        ({"examples": [{"f": [1.5, "a"]}]}, f"{KIND}float"),
        ({"examples": [{"f": ["a", True]}]}, f"{KIND}bytes"),
        ({"examples": [{"f": 2**63}]},
         "Feature: f has uint64_t element. Only int64_t is supported."),
        ({"examples": [{"f": {"b64": "-_"}}]}, "Unable to base64 decode"),
    ],
)  # fmt: skip
def test_body_errors(doc: Any, message: str) -> None:
    assert fails(doc) == message


def test_examples_become_named_inputs_with_the_context_as_default() -> None:
    parsed = request({"context": {"x": 9.0}, "examples": [{"x": 1.0}, {"x": 2}, {"other": 1}]})
    arrays = to_inputs(parsed, {"x": X})
    assert arrays["x"].dtype == np.float32
    assert arrays["x"].tolist() == [1.0, 2.0, 9.0]  # int64 features fill float inputs too


def test_rank_two_inputs_take_k_values_per_example() -> None:
    parsed = request({"examples": [{"input": [5.1, 3.5, 1.4, 0.2]}, {"input": [1, 2, 3, 4]}]})
    arrays = to_inputs(parsed, {"input": TensorSpec("input", "FP64", (-1, 4))})
    assert arrays["input"].shape == (2, 4)
    free = to_inputs(parsed, {"input": TensorSpec("input", "FP64", (-1, -1))})
    assert free["input"].shape == (2, 4)
    texts = to_inputs(request({"examples": [{"t": "a"}]}), {"t": TensorSpec("t", "BYTES", (-1,))})
    assert texts["t"].tolist() == [b"a"]


@pytest.mark.parametrize(
    ("doc", "spec", "message"),
    [
        ({"examples": [{"y": 1.0}]}, X, "Name: <unknown>, Feature: x (data type: float) is "
         "required but could not be found."),
        ({"examples": [{"x": "a"}]}, X, "Name: <unknown>, Key: x, Index: 0.  Data types don't "
         "match. Data type: bytes but expected type: float"),
        ({"examples": [{"x": 1}, {"x": 1.5}]}, TensorSpec("x", "INT64", (-1,)), "Name: <unknown>, "
         "Key: x, Index: 1.  Data types don't match. Data type: float but expected type: int64"),
        ({"examples": [{"x": [1.0, 2.0]}]}, X, "Name: <unknown>, Key: x, Index: 0.  Number of "
         "float values != expected.  Values size: 2 but output shape: []"),
        ({"examples": [{"x": [1.0]}, {"x": [1.0, 2.0]}]}, TensorSpec("x", "FP32", (-1, -1)),
         "Name: <unknown>, Key: x, Index: 1.  Number of float values != expected.  Values size: "
         "2 but output shape: [1]"),
    ],
)  # fmt: skip
def test_input_errors(doc: Any, spec: TensorSpec, message: str) -> None:
    with pytest.raises(InvalidInput) as err:
        to_inputs(request(doc), {"x": spec} if spec.name == "x" else {spec.name: spec})
    assert err.value.message == message


def tensor(data: Any, datatype: str = "FP32", name: str = "y") -> Tensor:
    if datatype == "BYTES":
        arr = np.empty(np.shape(data), dtype=object)
        arr[...] = data
    else:
        arr = np.asarray(data, dtype=np.float32 if datatype == "FP32" else None)
    return Tensor(name, datatype, arr.shape, arr)


def test_regress_results() -> None:
    assert regress_results(regress_values(tensor([3.5, 4.0]), 2)) == b'{"results":[3.5,4.0]}'
    assert regress_results(regress_values(tensor([[42.0]]), 1)) == b'{"results":[42.0]}'
    assert (
        regress_results(regress_values(tensor(np.array([0.1]), "FP64"), 1)) == b'{"results":[0.1]}'
    )


@pytest.mark.parametrize(
    ("output", "message"),
    [
        (tensor([1, 2], "INT64"), "Expected output Tensor of DT_FLOAT.  Got: DT_INT64"),
        (tensor([[1.0, 2.0]]), "Expected output Tensor shape to be either [batch_size] or "
         "[batch_size, 1] but got [1,2]"),
        (tensor([1.0, 2.0]), "Input batch size did not match output batch size: 1 vs. 2"),
    ],
)  # fmt: skip
def test_regress_result_errors(output: Tensor, message: str) -> None:
    with pytest.raises(InvalidInput) as err:
        regress_values(output, 1)
    assert err.value.message == message


SCORES = ("scores", TensorSpec("p", "FP32", (-1, -1)))
CLASSES = ("classes", TensorSpec("c", "BYTES", (-1, -1)))


def test_classify_results() -> None:
    only_scores = ClassifyView(None, SCORES, None)
    out = classify_results(only_scores, {"p": tensor([3.0, 12.0], name="p")}, 2)
    assert out == b'{"results":[[["",3.0]],[["",12.0]]]}'
    both = ClassifyView(CLASSES, SCORES, None)
    outputs = {"p": tensor([[0.25, 0.75]], name="p"), "c": tensor([[b"a", b"b"]], "BYTES", "c")}
    assert orjson.loads(classify_results(both, outputs, 1)) == {
        "results": [[["a", 0.25], ["b", 0.75]]]
    }
    no_scores = ClassifyView(CLASSES, None, None)
    assert classify_results(no_scores, outputs, 1) == b'{"results":[[["a",0.0],["b",0.0]]]}'
    labelled = ClassifyView(None, SCORES, ["setosa", "versicolor"])
    assert orjson.loads(classify_results(labelled, outputs, 1)) == {
        "results": [[["setosa", 0.25], ["versicolor", 0.75]]]
    }


def test_classify_result_errors() -> None:
    view = ClassifyView(CLASSES, SCORES, None)
    wide = {"p": tensor([[0.1, 0.2, 0.7]], name="p"), "c": tensor([[b"a", b"b"]], "BYTES", "c")}
    with pytest.raises(InvalidInput, match=r"should match in dim_size\(1\). Got 2 vs. 3$"):
        classify_results(view, wide, 1)
    ints = {"p": tensor([[1, 2]], "INT32", "p")}
    with pytest.raises(InvalidInput, match=r"^Expected scores Tensor of DT_FLOAT. Got: DT_INT32$"):
        classify_results(ClassifyView(None, SCORES, None), ints, 1)
    cube = {"p": tensor([[[1.0]]], name="p")}
    with pytest.raises(InvalidInput, match=r"num_classes\] but got \[1,1,1\]$"):
        classify_results(ClassifyView(None, SCORES, None), cube, 1)
    with pytest.raises(InvalidInput, match=r"^Expected scores output batch size of 2. Got: 1$"):
        classify_results(ClassifyView(None, SCORES, None), {"p": tensor([[1.0]], name="p")}, 2)
