"""The C JSON number reader (``core/json_numbers.c``), run built with AddressSanitizer
(``tests/fuzz/asan.py``), against the readers of the library path.

Properties: ``find`` gives the spans that json_bulk.find_arrays's Python gives. ``read`` returns
None or (buffer, is_float) and raises nothing; where it reads an array, Python's own json (float()
for each float), orjson and simdjson (json_bulk's other readers; simdjson declines integers beyond
64 bits) read the same text as a flat list of numbers with bit-for-bit the same values: int64 when
it says integers, float64 otherwise. ``read_single`` reads what ``read`` reads and declines what
it declines, its floats as numpy's cast of them to float32 (float64 where the cast overflows), its
integers as they are.
"""

from __future__ import annotations

import json

import numpy as np
import orjson
import simdjson

from rosettaserve.core import json_bulk
from tests.fuzz import asan

reader = asan.load()
json_bulk.json_numbers = None  # find_arrays' Python: the reference for the C search
json_bulk.MIN_ARRAY = 4  # arrays as short as a fuzzed input holds


def check(data: bytes) -> None:
    spans = reader.find(data, b"data", json_bulk.MIN_ARRAY)
    assert spans == json_bulk.find_arrays(data, b"data"), spans
    result = reader.read(data)
    for view in (bytearray(data), memoryview(data)):  # every bytes-like form reads alike
        again = reader.read(view)
        assert (again is None) == (result is None)
        if result is not None and again is not None:
            assert bytes(again[0]) == bytes(result[0])
            assert again[1] == result[1]
    if result is None:  # read_single declines the same texts (json_bulk relies on it)
        assert reader.read_single(data) is None
        return
    values, is_float = result
    assert type(values) is bytearray
    assert type(is_float) is bool
    got = np.frombuffer(values, dtype=np.float64 if is_float else np.int64)
    check_single(data, got)
    doc = orjson.loads(data)  # anything the reader takes is JSON
    assert type(doc) is list, doc
    assert all(type(v) in (int, float) for v in doc), doc
    assert is_float == any(type(v) is float for v in doc), (is_float, doc)
    expected = np.array(doc, dtype=np.float64 if is_float else np.int64)
    assert got.tobytes() == expected.tobytes(), (got, expected)
    stdlib = json.loads(data)  # float(text) for every float, int for every integer
    python = np.array(stdlib, dtype=got.dtype)
    assert got.tobytes() == python.tobytes(), (got, python)
    try:
        parsed = simdjson.Parser().parse(data)
    except (RuntimeError, ValueError):  # an integer beyond 64 bits among floats: simdjson
        assert is_float  # declines (BIGINT_ERROR, or NUMBER_ERROR past uint64), we read it
        assert any(type(v) is int and not -(2**63) <= v < 2**64 for v in stdlib)
        return
    assert isinstance(parsed, simdjson.Array)
    buffer = np.frombuffer(parsed.as_buffer(of_type="d" if is_float else "i"), dtype=got.dtype)
    assert buffer.tobytes() == got.tobytes(), (buffer, got)


def check_single(data: bytes, got: np.ndarray) -> None:
    single = reader.read_single(data)
    assert single is not None
    values, code = single
    if got.dtype == np.int64:
        assert code == "q"
        assert bytes(values) == got.tobytes()
        return
    with np.errstate(over="ignore"):
        narrowed = got.astype(np.float32)
    expected = got if np.isinf(narrowed).any() else narrowed
    assert code == expected.dtype.char, (code, expected.dtype)
    assert bytes(values) == expected.tobytes(), (values, expected)
