"""An answer's JSON as TorchServe's worker writes it: ``json.dumps(value, indent=2)``.

With ``indent`` set, the standard library encodes in pure Python (its C encoder takes no
indent), and that was the largest single step of a small request to a handler answering a list
of numbers, as most classifiers and regressors do (``[[0.12, 0.88]]``). Such an answer -- lists
nested in lists, floats and ints -- is written here with the same text; any other value goes to
``json.dumps`` itself. tests/unit/test_torchserve_answer_json.py holds the two to each other.
"""

from __future__ import annotations

import json
import math
from typing import Any

_INFINITY = float("inf")
MAX_DEPTH = 32  # deeper (or a list holding itself): json.dumps, which finds the cycle


def indented(value: Any) -> bytes:
    """``json.dumps(value, indent=2)`` as UTF-8 (TypeError where json.dumps raises it)."""
    parts: list[str] = []
    if type(value) is list and _numbers(value, 0, parts):
        return "".join(parts).encode()
    return json.dumps(value, indent=2).encode("utf-8")


def _numbers(items: list[Any], depth: int, parts: list[str]) -> bool:
    """Append the text of ``items`` (a list of lists, floats and ints only; False if not)."""
    if depth > MAX_DEPTH:
        return False
    if not items:
        parts.append("[]")
        return True
    inner = "\n" + "  " * (depth + 1)
    separator = "[" + inner
    for item in items:
        parts.append(separator)
        separator = "," + inner
        kind = type(item)  # exact types: a bool is an int json writes as true/false
        if kind is float:
            parts.append(_float(item))
        elif kind is int:
            parts.append(int.__repr__(item))
        elif kind is not list or not _numbers(item, depth + 1, parts):
            return False
    parts.append("\n" + "  " * depth + "]")
    return True


def _float(x: float) -> str:
    """A float as json writes it (allow_nan, its default: NaN and the infinities by name)."""
    if math.isnan(x):
        return "NaN"
    if x == _INFINITY:
        return "Infinity"
    if x == -_INFINITY:
        return "-Infinity"
    return float.__repr__(x)
