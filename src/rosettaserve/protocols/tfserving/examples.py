"""Classify and regress: TF's ``examples`` (+ ``context``) JSON <-> core. Pure functions.

The body becomes tf.Example-like features first, with TF's checks and errors (before the model
is looked up, as in TF). Then each signature input takes the feature of the same name from
every example (the example's own, else the context's), stacked along dimension 0: one value per
example for an input of shape [-1], k values for [-1, k].
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import orjson

from rosettaserve.core import dtypes
from rosettaserve.core.errors import InvalidInput
from rosettaserve.core.types import Tensor, TensorSpec
from rosettaserve.protocols.tfserving import floats, schema, tensors
from rosettaserve.protocols.tfserving.convert import signature_name
from rosettaserve.protocols.tfserving.jsonio import Body, snippet, type_name
from rosettaserve.protocols.tfserving.signatures import ClassifyView

INT64, FLOAT, BYTES = "int64", "float", "bytes"
_ACCEPTS = {"BYTES": {BYTES}, "FP16": {FLOAT, INT64}, "FP32": {FLOAT, INT64}}
_ACCEPTS |= {"FP64": {FLOAT, INT64}, "BF16": {FLOAT, INT64}}


@dataclass(slots=True)
class Feature:
    kind: str | None = None  # int64 | float | bytes; None while it has no values
    values: list[Any] = field(default_factory=list)


Example = dict[str, Feature]


@dataclass(frozen=True, slots=True)
class ExamplesRequest:
    signature_name: str
    context: Example
    examples: list[Example]


def parse(body: Body) -> ExamplesRequest:
    doc = body.doc
    name = signature_name(doc)
    context = example(doc[schema.CONTEXT]) if schema.CONTEXT in doc else {}
    if schema.EXAMPLES not in doc:  # TF says "classify" for regress too
        raise InvalidInput(
            f"JSON Value: {snippet(doc)} When method is classify, key 'examples' is expected "
            "and was not found"
        )
    items = doc[schema.EXAMPLES]
    if not isinstance(items, list):
        raise InvalidInput(
            f"JSON Value: {snippet(doc)} Expecting 'examples' value to be an list/array"
        )
    if not items:
        raise InvalidInput(f"JSON Value: {snippet(doc)} 'examples' value is an empty array")
    return ExamplesRequest(name, context, [example(item) for item in items])


def example(value: Any) -> Example:
    if not isinstance(value, dict):
        raise InvalidInput(f"Example must be JSON object but got JSON {type_name(value)}")
    features = {}
    for name, content in value.items():
        feature = Feature()
        for item in content if isinstance(content, list) else [content]:
            _add(feature, name, item)
        features[name] = feature
    return features


def _add(feature: Feature, name: str, value: Any) -> None:
    if (
        value is None
        or isinstance(value, list)
        or (isinstance(value, dict) and not tensors.is_b64(value))
    ):
        raise InvalidInput(
            f"Feature: {name} has element with unexpected JSON type: {type_name(value)}"
        )
    if isinstance(value, bool):
        kind, value = INT64, int(value)
    elif isinstance(value, dict):
        kind, value = BYTES, tensors.b64decode(value["b64"])
    elif isinstance(value, str):
        kind, value = BYTES, value.encode()
    elif isinstance(value, int) and schema.INT64[0] <= value <= schema.UINT64[1]:
        if value > schema.INT64[1]:
            raise InvalidInput(f"Feature: {name} has uint64_t element. Only int64_t is supported.")
        kind = INT64
    else:
        kind, value = FLOAT, float(value)  # narrowed to float32 when stacked
    if feature.kind not in (None, kind):
        raise InvalidInput(
            f"Unexpected element type in feature: {name} expecting type: {feature.kind}"
        )
    feature.kind = kind
    feature.values.append(value)


# -- examples -> inputs -----------------------------------------------------------------------


def to_inputs(request: ExamplesRequest, specs: dict[str, TensorSpec]) -> dict[str, np.ndarray]:
    """One array per signature input, keyed by alias."""
    arrays = {}
    for alias, spec in specs.items():
        rows = []
        for i, features in enumerate(request.examples):
            feature = features.get(alias, request.context.get(alias))
            if feature is None:
                raise InvalidInput(
                    f"Name: <unknown>, Feature: {alias} (data type: "
                    f"{schema.tf_type(spec.datatype).short}) is required but could not be found."
                )
            _check_kind(feature, alias, i, spec)
            rows.append(feature.values)
        arrays[alias] = _stack(rows, alias, spec)
    return arrays


def _check_kind(feature: Feature, alias: str, index: int, spec: TensorSpec) -> None:
    accepted = _ACCEPTS.get(spec.datatype, {INT64})
    if feature.kind is not None and feature.kind not in accepted:
        raise InvalidInput(
            f"Name: <unknown>, Key: {alias}, Index: {index}.  Data types don't match. "
            f"Data type: {feature.kind} but expected type: {schema.tf_type(spec.datatype).short}"
        )


def _stack(rows: list[list[Any]], alias: str, spec: TensorSpec) -> np.ndarray:
    if not spec.shape:
        raise InvalidInput(
            f"input '{spec.name}' has no batch dimension (shape []), so examples cannot "
            "be stacked into it"
        )
    per_example = _row_shape(spec.shape[1:], len(rows[0]))
    wanted = math.prod(per_example) if per_example is not None else -1
    for i, values in enumerate(rows):
        if len(values) != wanted:
            shown = per_example if per_example is not None else spec.shape[1:]
            raise InvalidInput(
                f"Name: <unknown>, Key: {alias}, Index: {i}.  Number of "
                f"{schema.tf_type(spec.datatype).short} values != expected.  Values size: "
                f"{len(values)} but output shape: {schema.shape_text(shown)}"
            )
    flat = [v for values in rows for v in values]
    shape = (len(rows), *(per_example or ()))
    return _array(flat, spec.datatype).reshape(shape)


def _row_shape(dims: tuple[int, ...], count: int) -> tuple[int, ...] | None:
    """The per-example shape: the input's dims after the batch, a -1 sized by ``count``."""
    known = math.prod(d for d in dims if d != -1)
    free = dims.count(-1)
    if free == 0:
        return dims
    if free == 1 and known and count % known == 0:
        return tuple(count // known if d == -1 else d for d in dims)
    return None


def _array(flat: list[Any], datatype: str) -> np.ndarray:
    target = dtypes.lookup(datatype).numpy
    if datatype == "BYTES":
        out = np.empty(len(flat), dtype=object)
        out[:] = flat
        return out
    if datatype in ("FP16", "FP32", "FP64", "BF16"):
        with np.errstate(over="ignore"):
            return np.array(flat, dtype=np.float64).astype(np.float32).astype(target)
    with np.errstate(over="ignore"):
        return np.array(flat, dtype=np.int64).astype(target)


# -- results ----------------------------------------------------------------------------------


def classify_table(
    view: ClassifyView, outputs: dict[str, Tensor], batch: int
) -> tuple[np.ndarray, np.ndarray | None]:
    """The label (str) of every (example, class), and its score (float32) when the signature
    has scores: what REST and gRPC answer, each in its own form."""
    scores = classes = None
    if view.scores is not None:
        tensor = outputs[view.scores[1].name]
        if tensor.datatype not in ("FP32", "FP64"):
            raise InvalidInput(f"Expected scores Tensor of DT_FLOAT. Got: {_enum(tensor)}")
        scores = _table(tensor, "scores", batch).astype(np.float32)
    if view.classes is not None:
        tensor = outputs[view.classes[1].name]
        if tensor.datatype != "BYTES":
            raise InvalidInput(f"Expected classes Tensor of DT_STRING. Got: {_enum(tensor)}")
        classes = _table(tensor, "classes", batch)
    return _labels(view, classes, scores, batch), scores


def classify_results(view: ClassifyView, outputs: dict[str, Tensor], batch: int) -> bytes:
    """``{"results": [[[label, score], ...] per example]}``."""
    return classify_json(*classify_table(view, outputs, batch))


def classify_json(labels: np.ndarray, scores: np.ndarray | None) -> bytes:
    batch, width = labels.shape
    texts = floats.array_rows_json(scores.reshape(-1)) if scores is not None else None
    results = [
        [
            [labels[i, j], orjson.Fragment(texts[i * width + j] if texts else b"0.0")]
            for j in range(width)
        ]
        for i in range(batch)
    ]
    return orjson.dumps({schema.RESULTS: results})


def _labels(
    view: ClassifyView, classes: np.ndarray | None, scores: np.ndarray | None, batch: int
) -> np.ndarray:
    """The label of every (example, class) as str: from classes, class_labels, else ""."""
    table = classes if classes is not None else scores
    assert table is not None  # a ClassifyView has classes or scores
    width = table.shape[1]
    if scores is not None and scores.shape[1] != width:
        raise _mismatch(width, scores.shape[1])
    if classes is not None:
        out = np.empty(classes.shape, dtype=object)
        out.reshape(-1)[:] = [_text(item) for item in classes.reshape(-1)]
        return out
    if view.labels is not None:
        if len(view.labels) != width:
            raise _mismatch(len(view.labels), width)
        return np.array([view.labels] * batch, dtype=object).reshape(batch, width)
    return np.full((batch, width), "", dtype=object)


def _mismatch(classes: int, scores: int) -> InvalidInput:
    return InvalidInput(
        f"Tensors class and score should match in dim_size(1). Got {classes} vs. {scores}"
    )


def _text(item: Any) -> str:
    return item.decode("utf-8", "replace") if isinstance(item, bytes) else str(item)


def _table(tensor: Tensor, what: str, batch: int) -> np.ndarray:
    data = tensor.data.reshape(-1, 1) if tensor.data.ndim == 1 else tensor.data
    if data.ndim != 2:
        raise InvalidInput(
            "Expected Tensor shape: [batch_size num_classes] but got "
            + schema.shape_text(tensor.data.shape)
        )
    if data.shape[0] != batch:
        raise InvalidInput(f"Expected {what} output batch size of {batch}. Got: {data.shape[0]}")
    return data


def regress_values(tensor: Tensor, batch: int) -> np.ndarray:
    """One float32 value per example, with TF's checks of the output."""
    if tensor.datatype not in ("FP32", "FP64"):
        raise InvalidInput(f"Expected output Tensor of DT_FLOAT.  Got: {_enum(tensor)}")
    shape = tensor.data.shape
    if not (len(shape) == 1 or (len(shape) == 2 and shape[1] == 1)):
        raise InvalidInput(
            "Expected output Tensor shape to be either [batch_size] or [batch_size, 1] "
            f"but got {schema.shape_text(shape)}"
        )
    if shape[0] != batch:
        raise InvalidInput(
            f"Input batch size did not match output batch size: {batch} vs. {shape[0]}"
        )
    return tensor.data.reshape(-1).astype(np.float32)


def regress_results(values: np.ndarray) -> bytes:
    """``{"results": [value per example]}``."""
    return orjson.dumps({schema.RESULTS: orjson.Fragment(floats.array_json(values))})


def _enum(tensor: Tensor) -> str:
    return schema.tf_type(tensor.datatype).enum
