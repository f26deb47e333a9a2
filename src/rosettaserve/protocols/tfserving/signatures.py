"""TF signature_defs of a served model, derived from its signature and ``model.yaml``.

Every model has ``serving_default``: method predict, every input and output under its own name.
``model.yaml`` may declare more (or redefine ``serving_default``)::

    tfserving:
      signatures:
        regress_x_to_y: {method: regress, outputs: {outputs: y}}   # alias: model output
        classify_x_to_y: {method: classify, outputs: {scores: y}}
        only_y: {outputs: [y]}                                     # method predict

``inputs`` / ``outputs`` are a list of model tensor names or a map alias -> name (default: all;
a signature must take every model input). The method decides nothing at request time (as in TF,
whose method check is off by default): classify needs outputs aliased ``classes`` and/or
``scores`` (or a model with ``class_labels`` and one 2-D float output), regress one output.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rosettaserve.core.errors import InvalidInput, ModelError
from rosettaserve.core.registry import ModelVersion
from rosettaserve.core.types import TensorSpec
from rosettaserve.protocols.tfserving import schema

_CACHE = "tfserving.signatures"
_KEYS = {"method", "inputs", "outputs"}
_FLOATS = ("FP32", "FP64")


@dataclass(frozen=True, slots=True)
class Signature:
    name: str
    method: str
    inputs: dict[str, TensorSpec]  # alias -> the model's input
    outputs: dict[str, TensorSpec]  # alias -> the model's output


@dataclass(frozen=True, slots=True)
class ClassifyView:
    classes: tuple[str, TensorSpec] | None  # (alias, model output)
    scores: tuple[str, TensorSpec] | None
    labels: list[str] | None  # the model's class_labels, when they stand in for ``classes``


def signatures(mv: ModelVersion) -> dict[str, Signature]:
    return dict(_cached(mv))


def named(mv: ModelVersion, name: str) -> Signature | None:
    """The signature called ``name``, if the version has one (a lookup, no copy)."""
    return _cached(mv).get(name)


def _cached(mv: ModelVersion) -> dict[str, Signature]:
    cached: dict[str, Signature] | None = mv.extra.get(_CACHE)
    if cached is None:
        cached = mv.extra[_CACHE] = _build(mv)
    return cached


def find(mv: ModelVersion, name: str, method: str) -> Signature:
    """The signature a request names ("" = serving_default), with TF's errors."""
    key = name or schema.DEFAULT_SIGNATURE
    signature = _cached(mv).get(key)
    if signature is None:
        if method == schema.PREDICT:
            raise InvalidInput(f'Serving signature name: "{key}" not found in signature def')
        raise InvalidInput(f"No signature was found with the name: {key}")
    return checked(signature, name, method)


def checked(signature: Signature, name: str, method: str) -> Signature:
    """The signature ``name`` found, if ``method`` can call it (TF's error)."""
    if method == schema.PREDICT and not signature.inputs:
        raise InvalidInput(f"Failed to get input map for signature: {name or 'DEFAULT'}")
    return signature


def classify_view(signature: Signature, mv: ModelVersion) -> ClassifyView:
    outputs = signature.outputs
    classes, scores = _aliased(outputs, "classes"), _aliased(outputs, "scores")
    if classes or scores:
        return ClassifyView(classes, scores, None)
    labels = getattr(mv.model, "class_labels", None)
    tables = [(a, s) for a, s in outputs.items() if len(s.shape) == 2 and s.datatype in _FLOATS]
    if labels and len(tables) == 1:
        return ClassifyView(None, tables[0], [str(label) for label in labels])
    raise InvalidInput(
        'Expected classification signature outputs to contain at least one of "classes" or '
        f'"scores". Signature was: {signature.name}'
    )


def regress_output(signature: Signature) -> tuple[str, TensorSpec]:
    if len(signature.outputs) != 1:
        raise InvalidInput("Expected one output Tensor.")
    ((alias, spec),) = signature.outputs.items()
    return alias, spec


def _aliased(outputs: dict[str, TensorSpec], alias: str) -> tuple[str, TensorSpec] | None:
    spec = outputs.get(alias)
    return None if spec is None else (alias, spec)


# -- building ---------------------------------------------------------------------------------


def _build(mv: ModelVersion) -> dict[str, Signature]:
    config = mv.model.config if mv.model is not None else {}
    declared = _section(mv, config)
    found = {
        schema.DEFAULT_SIGNATURE: Signature(
            schema.DEFAULT_SIGNATURE,
            schema.PREDICT,
            {s.name: s for s in mv.inputs},
            {s.name: s for s in mv.outputs},
        )
    }
    for name, raw in declared.items():
        found[str(name)] = _declared(mv, str(name), raw)
    return found


def _section(mv: ModelVersion, config: dict[str, Any]) -> dict[Any, Any]:
    section = config.get("tfserving")
    if section is None:
        return {}
    if not isinstance(section, dict) or set(section) - {"signatures"}:
        raise _config_error(mv, "'tfserving' must be a mapping with the key 'signatures'")
    declared = section.get("signatures") or {}
    if not isinstance(declared, dict):
        raise _config_error(mv, "'tfserving.signatures' must map signature names to settings")
    return declared


def _declared(mv: ModelVersion, name: str, raw: Any) -> Signature:
    where = f"'tfserving.signatures.{name}'"
    if not isinstance(raw, dict) or set(raw) - _KEYS:
        raise _config_error(mv, f"{where} must be a mapping with keys among {sorted(_KEYS)}")
    method = raw.get("method", schema.PREDICT)
    if method not in schema.METHOD_NAMES:
        raise _config_error(mv, f"{where}: method must be predict, classify or regress")
    inputs = _pick(mv, mv.inputs, raw.get("inputs"), f"{where}.inputs")
    if {s.name for s in inputs.values()} != {s.name for s in mv.inputs}:
        raise _config_error(mv, f"{where}.inputs must take every input of the model")
    outputs = _pick(mv, mv.outputs, raw.get("outputs"), f"{where}.outputs")
    return Signature(name, method, inputs, outputs)


def _pick(mv: ModelVersion, specs: list[TensorSpec], raw: Any, where: str) -> dict[str, TensorSpec]:
    by_name = {s.name: s for s in specs}
    if raw is None:
        return dict(by_name)
    pairs = [(n, n) for n in raw] if isinstance(raw, list) else None
    if isinstance(raw, dict):
        pairs = list(raw.items())
    if pairs is None or not all(isinstance(a, str) and n in by_name for a, n in pairs):
        raise _config_error(
            mv, f"{where} must be a list of, or a map of aliases to, names among {list(by_name)}"
        )
    return {alias: by_name[name] for alias, name in pairs}


def _config_error(mv: ModelVersion, what: str) -> ModelError:
    return ModelError(f"model.yaml of model '{mv.name}': {what}")


# -- metadata ---------------------------------------------------------------------------------


def metadata(mv: ModelVersion) -> dict[str, Any]:
    """GetModelMetadataResponse as TF's REST API prints it (signature_def nested twice)."""
    defs = {name: _signature_def(s) for name, s in signatures(mv).items()}
    return {
        "model_spec": {"name": mv.name, "signature_name": "", "version": mv.version},
        "metadata": {"signature_def": {"signature_def": defs}},
    }


def _signature_def(signature: Signature) -> dict[str, Any]:
    return {
        "inputs": {alias: _tensor_info(s) for alias, s in signature.inputs.items()},
        "outputs": {alias: _tensor_info(s) for alias, s in signature.outputs.items()},
        "method_name": schema.METHOD_NAMES[signature.method],
        "defaults": {},
    }


def _tensor_info(spec: TensorSpec) -> dict[str, Any]:
    dims = [{"size": str(d), "name": ""} for d in spec.shape]
    return {
        "dtype": schema.tf_type(spec.datatype).enum,
        "tensor_shape": {"dim": dims, "unknown_rank": False},
        "name": spec.name,
    }
