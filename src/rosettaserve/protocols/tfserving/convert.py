"""Predict: TF's row (``instances``) and columnar (``inputs``) JSON <-> core. Pure functions."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import orjson

from rosettaserve.core.call import PROTOCOL
from rosettaserve.core.errors import InvalidInput, ServingError
from rosettaserve.core.registry import ModelVersion
from rosettaserve.core.types import InferenceRequest, RequestedOutput, Tensor, TensorSpec
from rosettaserve.protocols.tfserving import schema, tensors
from rosettaserve.protocols.tfserving.jsonio import Body, snippet
from rosettaserve.protocols.tfserving.signatures import Signature

ROW, COLUMNAR = "row", "columnar"
Arrays = dict[str, np.ndarray]  # signature alias -> array


def signature_name(doc: dict[str, Any]) -> str:
    value = doc.get(schema.SIGNATURE_KEY, "")
    if not isinstance(value, str):
        raise InvalidInput(
            f"JSON Value: {snippet(doc)} not formatted correctly. "
            "'signature_name' key must be a string value."
        )
    return value


def predict_inputs(body: Body, specs: dict[str, TensorSpec]) -> tuple[str, Arrays]:
    """The request format and one array per signature input, with TF's checks and errors."""
    doc = body.doc
    if schema.INSTANCES in doc:
        if schema.INPUTS in doc:
            raise InvalidInput(
                f"JSON Value: {snippet(doc)} Not formatted correctly expecting only one of "
                "'inputs' or 'instances' keys to exist "
            )
        instances = doc[schema.INSTANCES]
        if not isinstance(instances, list):
            raise InvalidInput(
                f"JSON Value: {snippet(doc)} Expecting 'instances' to be an list/array"
            )
        if not instances:
            raise InvalidInput(f"JSON Value: {snippet(doc)} No values in 'instances' array")
        return ROW, read_rows(instances, specs, body.maybe_bools)
    if schema.INPUTS in doc:
        return COLUMNAR, read_columns(doc[schema.INPUTS], specs, body.maybe_bools)
    raise InvalidInput("Missing 'inputs' or 'instances' key")


def _is_object(value: Any) -> bool:
    return isinstance(value, dict) and not tensors.is_b64(value)


# -- columnar ---------------------------------------------------------------------------------


def read_columns(value: Any, specs: dict[str, TensorSpec], maybe_bools: bool) -> Arrays:
    if not _is_object(value):
        if len(specs) > 1:
            raise InvalidInput(
                "inputs is a plain value/list, but expecting an object as multiple input "
                "tensors required as per tensorinfo_map"
            )
        ((alias, spec),) = specs.items()
        return {alias: tensors.to_array(value, spec.datatype, maybe_bools, alias)}
    arrays = {}
    for alias, spec in specs.items():  # other keys are ignored, as by TF
        if alias not in value:
            raise InvalidInput(f"Missing named input: {alias} in 'inputs' object.")
        arrays[alias] = tensors.to_array(value[alias], spec.datatype, maybe_bools, alias)
    return arrays


# -- rows -------------------------------------------------------------------------------------


def read_rows(instances: list[Any], specs: dict[str, TensorSpec], maybe_bools: bool) -> Arrays:
    first = instances[0]
    if not isinstance(first, dict) and len(specs) > 1:
        raise InvalidInput(
            "instances is a plain list, but expecting list of objects as multiple input "
            "tensors required as per tensorinfo_map"
        )
    if _is_object(first):
        return _object_rows(instances, specs, maybe_bools)
    alias, spec = next(iter(specs.items()))
    try:  # all rows as one tensor: the same values when it works, TF's errors come per row
        return {alias: tensors.to_array(instances, spec.datatype, maybe_bools, alias)}
    except ServingError:
        return _value_rows(instances, alias, spec)


def _value_rows(instances: list[Any], alias: str, spec: TensorSpec) -> Arrays:
    batch = _Batch(spec.datatype, alias)
    for i, item in enumerate(instances):
        if _is_object(item):
            raise InvalidInput(f"Expecting value/list but got object at item {i} of input list")
        with _wrapped(f"Failed to process element: {i} of 'instances' list. Error: "):
            batch.add(item)
    return {alias: batch.array(len(instances))}


def _object_rows(instances: list[Any], specs: dict[str, TensorSpec], maybe_bools: bool) -> Arrays:
    keys = set(specs)
    if keys != {schema.B64} and all(type(e) is dict and e.keys() == keys for e in instances):
        try:  # one tensor per input, as above
            return {
                a: tensors.to_array([e[a] for e in instances], s.datatype, maybe_bools, a)
                for a, s in specs.items()
            }
        except ServingError:
            pass
    return _object_rows_one_by_one(instances, specs)


def _object_rows_one_by_one(instances: list[Any], specs: dict[str, TensorSpec]) -> Arrays:
    batches = {alias: _Batch(spec.datatype, alias) for alias, spec in specs.items()}
    names = ",".join(sorted(specs))
    for i, item in enumerate(instances):
        if not _is_object(item):
            raise InvalidInput(f"Expecting object but got list at item {i} of input list")
        for key, value in item.items():
            with _wrapped(
                f"Failed to process element: {i} key: {key} of 'instances' list. Error: "
            ):
                if key not in batches:
                    raise InvalidInput(f"JSON object: does not have named input: {key}")
                batches[key].add(value)
        if item.keys() != specs.keys():
            raise InvalidInput(
                f"Failed to process element: {i} of 'instances' list. JSON object: "
                f"{snippet(item)} keys must be equal to: {names}"
            )
    return {alias: batch.array(len(instances)) for alias, batch in batches.items()}


class _Batch:
    """The rows of one input: each must have row 0's element count and shape."""

    def __init__(self, datatype: str, alias: str) -> None:
        self.datatype, self.alias = datatype, alias
        self.leaves: list[Any] = []
        self.shape: tuple[int, ...] | None = None
        self.size = 0

    def add(self, value: Any) -> None:
        leaves, shape = tensors.walk(value, self.datatype, self.alias)
        if self.shape is None:
            self.shape, self.size = shape, len(leaves)
        elif len(leaves) != self.size:
            raise InvalidInput(f"Expecting tensor size: {self.size} but got: {len(leaves)}")
        elif shape != self.shape:
            raise InvalidInput(
                f"Expecting shape {schema.shape_text(self.shape)} "
                f"but got: {schema.shape_text(shape)}"
            )
        self.leaves.extend(leaves)

    def array(self, rows: int) -> np.ndarray:
        shape = (rows, *(self.shape or ()))
        return tensors.leaves_array(self.leaves, shape, self.datatype, self.alias)


@contextmanager
def _wrapped(prefix: str) -> Iterator[None]:
    """Re-raise a conversion error as TF does: an InvalidArgument quoting the inner status."""
    try:
        yield
    except ServingError as exc:
        raise InvalidInput(f"{prefix}{exc.kind.value.grpc_name}: {exc.message}") from None


# -- core -------------------------------------------------------------------------------------


def inference_request(
    mv: ModelVersion,
    signature: Signature,
    arrays: Arrays,
    outputs: list[TensorSpec],
    protocol: str = "tfserving_rest",
) -> InferenceRequest:
    """The arrays (keyed by signature alias) as the model's named inputs."""
    inputs = []
    for alias, spec in signature.inputs.items():
        array = arrays.get(alias)
        if array is not None:
            inputs.append(Tensor(spec.name, spec.datatype, array.shape, array))
    return InferenceRequest(
        model_name=mv.name,
        model_version=mv.version,
        inputs=inputs,
        outputs=_requested(mv, outputs),
        context={PROTOCOL: protocol},
    )


def _requested(mv: ModelVersion, outputs: list[TensorSpec]) -> list[RequestedOutput] | None:
    """The outputs core is asked for: None (all) when they are the model's, in its order."""
    model = mv.outputs  # the usual case, every output in order, found without building lists
    if len(outputs) == len(model) and all(s.name == model[i].name for i, s in enumerate(outputs)):
        return None
    return [RequestedOutput(n) for n in dict.fromkeys([spec.name for spec in outputs])]


def by_alias(specs: dict[str, TensorSpec], outputs: list[Tensor]) -> dict[str, Tensor]:
    named = {t.name: t for t in outputs}
    return {alias: named[spec.name] for alias, spec in specs.items() if spec.name in named}


def encode_predict(fmt: str, outputs: dict[str, Tensor]) -> bytes:
    """TF's predict response: ``predictions`` (row requests) or ``outputs`` (columnar)."""
    if not outputs:
        raise InvalidInput("Cannot convert empty tensor map to JSON")
    if fmt == COLUMNAR:
        parts = {
            a: orjson.Fragment(tensors.to_json(t.data, t.datatype, a)) for a, t in outputs.items()
        }
        value: Any = next(iter(parts.values())) if len(parts) == 1 else parts
        return orjson.dumps({schema.OUTPUTS: value})
    batch = _row_batch(outputs)
    if len(outputs) == 1:
        ((alias, tensor),) = outputs.items()
        value = orjson.Fragment(tensors.to_json(tensor.data, tensor.datatype, alias))
    else:
        rows = {a: tensors.rows_to_json(t.data, t.datatype, a) for a, t in outputs.items()}
        value = [{a: orjson.Fragment(rows[a][i]) for a in rows} for i in range(batch)]
    return orjson.dumps({schema.PREDICTIONS: value})


def _row_batch(outputs: dict[str, Tensor]) -> int:
    batch = -1
    for alias, tensor in outputs.items():
        if tensor.data.ndim == 0:
            raise InvalidInput(f"Tensor name: {alias} has no shape information ")
        size = tensor.data.shape[0]
        if batch >= 0 and size != batch:
            raise InvalidInput(
                f"Tensor name: {alias} has inconsistent batch size: {size} expecting: {batch}"
            )
        batch = size
    return batch
