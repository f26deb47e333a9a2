"""The Open Inference Protocol (V2) as the tests expect it: its datatypes, the tensors the
client tests send, and the signatures of the test repository's models (tests/conftest.py).

The datatype table is the tests' own, written apart from ``rosettaserve.core.dtypes`` so that
the code is not checked against itself. Nothing here imports a client library: the main run
(kserve, tritonclient.http) and tests_tritongrpc (tritonclient.grpc) both use this module.
"""

from __future__ import annotations

import zlib
from typing import Any

import ml_dtypes
import numpy as np

# name: (numpy type, bytes per element on the wire; 0: variable), in the protocol's order
V2: dict[str, tuple[Any, int]] = {
    "BOOL": (np.bool_, 1),
    "UINT8": (np.uint8, 1),
    "UINT16": (np.uint16, 2),
    "UINT32": (np.uint32, 4),
    "UINT64": (np.uint64, 8),
    "INT8": (np.int8, 1),
    "INT16": (np.int16, 2),
    "INT32": (np.int32, 4),
    "INT64": (np.int64, 8),
    "FP16": (np.float16, 2),
    "FP32": (np.float32, 4),
    "FP64": (np.float64, 8),
    "BF16": (ml_dtypes.bfloat16, 2),
    "BYTES": (np.object_, 0),
}
DATATYPES = list(V2)
_finfo: Any = ml_dtypes.finfo  # numpy's finfo, and bfloat16's (untyped)
NUMPY_TYPES: dict[str, Any] = {name: np_type for name, (np_type, _) in V2.items()}
JSON_DATATYPES = [d for d in DATATYPES if d not in ("FP16", "BF16")]  # JSON has no 16-bit floats
# 64-bit integers that a JSON number read as a double would change: the extremes, 2**53 + 1
EXTREMES_64 = {
    "INT64": [-(2**63), -(2**63) + 1, -1, 0, 1, 2**63 - 2, 2**63 - 1],
    "UINT64": [0, 1, 2**32, 2**53 + 1, 2**63 - 1, 2**63, 2**64 - 1],
}


def rng_for(tag: str) -> np.random.Generator:
    """A generator seeded by ``tag``: the same values on every run."""
    return np.random.default_rng(zlib.crc32(tag.encode()))


def sample(dtype: str, tag: str, *, non_finite: bool = True, non_utf8: bool = True) -> np.ndarray:
    """A [2, 4] tensor of ``dtype`` with edge values (the extremes, -0.0, empty and NUL bytes);
    NaN and infinities only with ``non_finite``, a BYTES item that is not UTF-8 only with
    ``non_utf8`` (what JSON, or a client that decodes every BYTES output, cannot carry)."""
    if dtype == "BOOL":
        return np.array([[True, False, True, True], [False, False, True, False]])
    if dtype == "BYTES":
        last = b"\xff\xfe\x00raw" if non_utf8 else "h\u00e9llo w\u00f6rld".encode()
        items = [b"", b"a\x00b", b"\x00", b"plain", b"\x00\x00", b"", b"end\x00", last]
        return np.array(items, dtype=object).reshape(2, 4)
    np_type = NUMPY_TYPES[dtype]
    if dtype.startswith(("UINT", "INT")):
        info = np.iinfo(np_type)
        rand = rng_for(tag + dtype).integers(
            info.min, info.max, size=4, dtype=np_type, endpoint=True
        )
        return np.array([[info.min, info.max, 0, 1], rand], dtype=np_type)
    finfo = _finfo(np_type)
    special = [np.inf, -np.inf, np.nan, -0.0] if non_finite else [-0.0, 0.5, -2.25, 1.0]
    row = [float(finfo.max), float(finfo.min), float(finfo.smallest_normal), 3.0]
    return np.array([row, special], dtype=np_type)


def as_bytes_list(array: np.ndarray) -> list[bytes]:
    return [x if isinstance(x, bytes) else str(x).encode() for x in array.ravel()]


def assert_same(got: np.ndarray | None, expected: np.ndarray, dtype: str) -> None:
    """Equal shapes and, but for BYTES, equal dtypes and bit-exact values (so NaN, -0.0 and
    the extremes count too)."""
    assert got is not None
    assert got.shape == expected.shape, (got.shape, expected.shape)
    if dtype == "BYTES":
        assert as_bytes_list(got) == as_bytes_list(expected)
    else:
        assert got.dtype == expected.dtype, (got.dtype, expected.dtype)
        assert got.tobytes() == expected.tobytes(), (got, expected)


Tensor = tuple[str, str, list[int]]  # name, datatype, shape


def _signature(
    versions: list[str], inputs: list[Tensor], outputs: list[Tensor]
) -> tuple[list[str], list[Tensor], list[Tensor]]:
    return versions, inputs, outputs


# what each model of the test repository declares: versions, inputs, outputs
MODEL_SIGNATURES = {
    "mlp_onnx": _signature(["1"], [("INPUT0", "FP32", [-1, 4])], [("OUTPUT0", "FP32", [-1, 3])]),
    "iris_sklearn": _signature(
        ["1"],
        [("input", "FP64", [-1, 4])],
        [("predict", "BYTES", [-1]), ("predict_proba", "FP64", [-1, 3])],
    ),
    "text_python": _signature(
        ["1"], [("TEXT", "BYTES", [-1])], [("UPPER", "BYTES", [-1]), ("LENGTH", "INT64", [-1])]
    ),
    "versioned_python": _signature(
        ["1", "2"], [("INPUT0", "FP32", [-1, -1])], [("OUTPUT0", "FP32", [-1, -1])]
    ),
    "params_async": _signature(
        ["1"], [("INPUT0", "INT32", [-1])], [("OUTPUT0", "INT32", [-1]), ("PARAMS", "BYTES", [1])]
    ),
    "stream_python": _signature(["1"], [("INPUT0", "INT32", [-1])], [("OUTPUT0", "INT32", [1])]),
    **{
        f"identity_{d.lower()}": _signature(
            ["1"], [("INPUT0", d, [-1, -1])], [("OUTPUT0", d, [-1, -1])]
        )
        for d in DATATYPES
    },
}
