"""TF Serving's float text (fact sheet §5 "Value encoding"), one by one and vectorized."""

from __future__ import annotations

import re

import numpy as np
import orjson
import pytest

from rosettaserve.protocols.tfserving.floats import array_json, array_rows_json, float_text

F32 = np.float32


@pytest.mark.parametrize(
    ("value", "single", "text"),
    [
        (float(F32(0.1)), True, "0.1"),  # FP32 0.1 stays 0.1 (not 0.10000000149011612)
        (3.0, True, "3.0"),  # integral floats get .0
        (100.0, True, "100.0"),
        (-0.0, True, "-0.0"),
        (0.0, True, "0.0"),
        (1234567.0, True, "1234567.0"),
        (9000000.0, True, "9e+06"),  # 6-digit %g first
        (float(F32(0.00003)), True, "3e-05"),
        (float(F32(1 / 3)), True, "0.333333343"),  # then %.9g for floats
        (555557.5, True, "555557.5"),
        (float(F32(1435774380)), True, "1.43577434e+09"),
        (1 / 3, False, "0.33333333333333331"),  # %.17g for doubles
        (0.5, False, "0.5"),
        (float("nan"), True, "NaN"),
        (float("inf"), True, "Infinity"),
        (float("-inf"), False, "-Infinity"),
    ],
)
def test_float_text_follows_tf(value: float, single: bool, text: str) -> None:
    assert float_text(value, single) == text


def tokens(text: bytes) -> list[str]:
    return re.findall(r"[^\[\],]+", text.decode())


EDGES = [0.1, 1.0, 3.0, 1e-7, 9e6, 1 / 3, 1234567.0, 1e20, -0.0, 0.0, 3e-5, 100.0, 555557.5]
EDGES += [1435774380.0, float("nan"), float("inf"), float("-inf"), 1e-4, 123456.0, 999999.5]
EDGES += [9999999.0, 0.00012345678, 1e-45, 3.4e38, 0.1005859375, 16777217.0, 99999.95]


def test_vectorized_float32_text_equals_tf_for_edges_and_random_values() -> None:
    rng = np.random.default_rng(7)
    samples = [
        np.array(EDGES, dtype=F32),
        rng.random(20000).astype(F32),
        (rng.standard_normal(20000) * 1e3).astype(F32),
        np.exp(rng.uniform(-40, 40, 20000)).astype(F32),
        (rng.integers(-4000, 4000, 20000) / 64).astype(F32),
        rng.integers(0, 1 << 30, 20000).astype(F32),
    ]
    for arr in samples:
        want = [float_text(float(v), True) for v in arr]
        assert tokens(array_json(arr)) == want


def test_vectorized_float64_uses_tf_text_or_the_same_value_in_fewer_digits() -> None:
    rng = np.random.default_rng(8)
    arr = np.concatenate([np.array(EDGES), rng.random(5000), rng.integers(-99, 99, 500) / 8.0])
    for got, value in zip(tokens(array_json(arr)), arr.tolist(), strict=True):
        tf = float_text(value, False)
        if got != tf:  # TF's 17 digits where fewer read back the same (documented)
            assert float(got) == value
            assert len(got) < len(tf)


def test_nested_arrays_keep_their_shape_and_rows_slice_the_same_text() -> None:
    arr = np.array([[[1e-7, 2.5], [float("nan"), 3]], [[0.1, -1], [9e6, 4]]], dtype=F32)
    text = array_json(arr)
    assert text == b"[[[1e-07,2.5],[NaN,3.0]],[[0.1,-1.0],[9e+06,4.0]]]"
    assert array_rows_json(arr) == [b"[[1e-07,2.5],[NaN,3.0]]", b"[[0.1,-1.0],[9e+06,4.0]]"]
    flat = arr.reshape(-1)
    assert array_rows_json(flat) == [t.encode() for t in tokens(text)]


def test_scalars_and_empty_arrays() -> None:
    assert array_json(np.array(2.0, dtype=F32)) == b"2.0"
    assert array_json(np.empty((2, 0), dtype=F32)) == b"[[],[]]"
    assert array_rows_json(np.empty((2, 0), dtype=F32)) == [b"[]", b"[]"]
    assert array_rows_json(np.empty((0, 3), dtype=F32)) == []


def test_a_large_array_without_special_values_is_one_pass() -> None:
    arr = np.random.default_rng(9).random((512, 512)).astype(F32) + 1
    rows = array_rows_json(arr)
    assert b"[" + b",".join(rows) + b"]" == array_json(arr)
    assert np.array_equal(np.array(orjson.loads(array_json(arr)), dtype=F32), arr)


def test_every_kind_of_float32_bit_pattern_reads_as_tf_writes_it() -> None:
    bits = np.random.default_rng(10).integers(0, 2**32, 60000, dtype=np.uint64)
    arr = bits.astype(np.uint32).view(F32)  # subnormals, huge values, NaN, infinities, ...
    tiny = np.exp(np.random.default_rng(11).uniform(-20, -9, 20000)).astype(F32)  # scientific
    for sample in (arr, tiny, -tiny):
        assert tokens(array_json(sample)) == [float_text(float(v), True) for v in sample]
