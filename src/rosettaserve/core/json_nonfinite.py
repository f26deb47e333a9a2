"""NaN and the infinities in JSON tensor data: the bare tokens ``NaN``, ``Infinity``, ``-Infinity``.

JSON (RFC 8259) has no spelling for them: orjson refuses them when reading, and writes ``null``
for them, which turns a model's ``inf`` into "no value" without a word. So every JSON answer of
this server writes a non-finite tensor value as one of these three tokens, as TF Serving has
always written them (its REST API's documented format) and as Python's ``json`` module and
rapidjson, which tritonclient's HTTP client parses answers with, read and write them; and the
OIP REST and grps readers take them back, so a value round-trips. Strict parsers (orjson,
JavaScript's ``JSON.parse``) refuse such an answer outright rather than read a wrong value;
a client that needs strict JSON asks for the tensor in binary (OIP's binary data extension).
grps messages keep protobuf's own JSON mapping, which quotes them (``"NaN"``, ``"Infinity"``).
"""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np
import orjson

try:
    from rosettaserve.core import json_floats as json_floats  # noqa: PLC0414 - convert.py uses it
except ImportError:  # not built (scripts/compile_native.py): orjson writes every array
    json_floats = None  # type: ignore[assignment]

NAN, INFINITY, MINUS_INFINITY = "NaN", "Infinity", "-Infinity"
_NUMPY = orjson.OPT_SERIALIZE_NUMPY
_SMALL = 8  # values tested in Python
_FLOAT32 = np.dtype(np.float32)  # native byte order


def token(value: float) -> str:
    """The token of a non-finite value."""
    if math.isnan(value):
        return NAN
    return INFINITY if value > 0 else MINUS_INFINITY


def array(arr: np.ndarray) -> np.ndarray | orjson.Fragment:
    """What orjson should write for a numeric array (with OPT_SERIALIZE_NUMPY): the array itself
    when every value is finite, else its JSON text with the tokens where orjson writes null.
    A float32 array's text comes from json_floats (C), which writes the same text as orjson in
    less time, tokens included, and needs no test of the values first."""
    if json_floats is not None and arr.dtype == _FLOAT32 and arr.ndim:
        return orjson.Fragment(json_floats.write(np.ascontiguousarray(arr)))
    if arr.dtype.kind != "f" or _finite(arr):
        return arr
    flat = np.ascontiguousarray(arr)
    pieces = orjson.dumps(flat, option=_NUMPY).split(b"null")  # floats: null only for these
    odd = flat.reshape(-1)[~np.isfinite(flat.reshape(-1))].tolist()
    out = [pieces[0]]
    for value, piece in zip(odd, pieces[1:], strict=True):
        out += [token(value).encode(), piece]
    return orjson.Fragment(b"".join(out))


def _finite(arr: np.ndarray) -> bool:
    """Every value finite? (numpy's overhead per call is the whole cost of a short array)
    [cost: finite]."""
    flat = arr if arr.ndim == 1 else arr.reshape(-1)
    if flat.size <= _SMALL:
        return all(map(math.isfinite, flat.tolist()))
    return int(np.count_nonzero(np.isfinite(flat))) == flat.size


def loads(text: bytes | bytearray | memoryview) -> Any:
    """A JSON document, which may hold the three tokens as numbers (orjson reads every other
    one; the standard library the few with tokens). Raises orjson.JSONDecodeError, with orjson's
    message, when the text is not JSON even so."""
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        raw = bytes(text)
        if b"NaN" not in raw and b"Infinity" not in raw:
            raise
        try:
            doc = json.loads(raw.decode(), parse_float=_finite_float, parse_int=_int)
            orjson.dumps(doc)  # what orjson refuses besides: lone surrogates
        except (ValueError, RecursionError, TypeError, orjson.JSONEncodeError):
            raise exc from None
        return doc


def _finite_float(text: str) -> float:
    """A number literal, refused (as orjson refuses it) where it is too large for a double: an
    infinity is only ever the token."""
    value = float(text)
    if math.isinf(value):
        raise ValueError(f"number is infinity when parsed as double: {text[:40]}")
    return value


def _int(text: str) -> int | float:
    """An integer literal as orjson reads it: a float beyond 64 bits."""
    value = int(text)
    return value if -(2**63) <= value < 2**64 else _finite_float(text)
