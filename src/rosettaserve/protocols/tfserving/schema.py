"""TensorFlow Serving's wire names: datatypes, signature methods, version states, JSON keys."""

from __future__ import annotations

from dataclasses import dataclass

from rosettaserve.core.registry import VersionState


@dataclass(frozen=True, slots=True)
class TfType:
    enum: str  # the DataType enum name in metadata: DT_FLOAT
    short: str  # DataTypeString(), used in error texts: float
    json: bool = True  # TF converts it from and to JSON


def _t(enum: str, short: str, json: bool = True) -> TfType:
    return TfType(enum, short, json)


# Keyed by our V2 datatype names (core.dtypes is the one table of what each name means).
TF_TYPES: dict[str, TfType] = {
    "BOOL": _t("DT_BOOL", "bool"),
    "UINT8": _t("DT_UINT8", "uint8"),
    "UINT16": _t("DT_UINT16", "uint16", json=False),
    "UINT32": _t("DT_UINT32", "uint32"),
    "UINT64": _t("DT_UINT64", "uint64"),
    "INT8": _t("DT_INT8", "int8"),
    "INT16": _t("DT_INT16", "int16"),
    "INT32": _t("DT_INT32", "int32"),
    "INT64": _t("DT_INT64", "int64"),
    "FP16": _t("DT_HALF", "half", json=False),
    "FP32": _t("DT_FLOAT", "float"),
    "FP64": _t("DT_DOUBLE", "double"),
    "BF16": _t("DT_BFLOAT16", "bfloat16", json=False),
    "BYTES": _t("DT_STRING", "string"),
}

PREDICT, CLASSIFY, REGRESS = "predict", "classify", "regress"
METHOD_NAMES = {m: f"tensorflow/serving/{m}" for m in (PREDICT, CLASSIFY, REGRESS)}
DEFAULT_SIGNATURE = "serving_default"

# Our version states as TF's ServableState names; a version that failed to load is END.
STATES = {
    VersionState.LOADING: "LOADING",
    VersionState.READY: "AVAILABLE",
    VersionState.UNLOADING: "UNLOADING",
    VersionState.UNAVAILABLE: "END",
}

SIGNATURE_KEY = "signature_name"
INSTANCES, INPUTS = "instances", "inputs"
PREDICTIONS, OUTPUTS = "predictions", "outputs"
EXAMPLES, CONTEXT, RESULTS = "examples", "context", "results"
B64 = "b64"
BYTES_SUFFIX = "_bytes"
INT32 = (-(2**31), 2**31 - 1)
INT64 = (-(2**63), 2**63 - 1)
UINT32 = (0, 2**32 - 1)
UINT64 = (0, 2**64 - 1)


def tf_type(datatype: str) -> TfType:
    return TF_TYPES[datatype]


def shape_text(shape: tuple[int, ...]) -> str:
    """A shape as TF prints it in errors: ``[2,3]``."""
    return "[" + ",".join(str(d) for d in shape) + "]"
