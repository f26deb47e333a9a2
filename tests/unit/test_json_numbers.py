"""json_numbers (C): a flat JSON array of numbers reads to exactly the values Python's own JSON
reader gives (correctly rounded doubles, exact int64), and anything else is refused (None) so
that the ordinary reader can report it."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest

from rosettaserve.core import json_numbers


def read(text: bytes | bytearray | memoryview) -> list[float] | list[int] | None:
    result = json_numbers.read(text)
    if result is None:
        return None
    values, is_float = result
    return np.frombuffer(values, dtype=np.float64 if is_float else np.int64).tolist()


def same(got: list[float] | list[int] | None, text: bytes) -> None:
    """Bit for bit what json.loads reads (so -0.0 and 0.0 differ), and the same kind."""
    expected = json.loads(text)
    assert got is not None, text
    assert len(got) == len(expected)
    floats = any(isinstance(v, float) for v in expected)
    if floats:
        assert np.array_equal(np.float64(got).view(np.uint64), np.float64(expected).view(np.uint64))
    else:
        assert all(type(v) is int for v in got)
        assert got == expected


@pytest.mark.parametrize(
    "text",
    [
        b"[1,2,3]",
        b" [ 1 , -2.5e3 ,0 ] ",
        b"[\n\t1,\r\n2]",
        b"[-0]",
        b"[-0.0, 0.0]",
        b"[0.1, 0.2, 0.30000000000000004]",
        b"[-0.95217013,1.1003357,0.07547671,-0.0012345678]",  # float32 values as clients send them
        b"[9223372036854775807,-9223372036854775808]",
        b"[1234567890123456789,-123456789]",
        b"[99999999,100000000,12345678901234567]",
        b"[1, 2.5]",  # one float among integers: all floats
        b"[1E5, 1e+5, 1e-5, 2.5E-3]",
        b"[4.9e-324, 2.2250738585072014e-308, 1.7976931348623157e308]",
        b"[1e-400]",  # below the smallest subnormal: 0.0, as Python reads it
        b"[1e22, 1e23, 9007199254740993, 9007199254740993.0]",
        b"[12345678901234567890123.5, 123456789012345678901234567890.0]",
        b"[0.000000000000000000000000001234567890123456789]",
        b"[3.14159265358979323846264338327950288]",
        b"[1.00000000000000011102230246251565404236316680908203125]",  # a tie: to even
        b"[7]",
        b"[-7.25]",
    ],
)
def test_a_number_array_reads_as_python_reads_it(text: bytes) -> None:
    same(read(text), text)


@pytest.mark.parametrize(
    "text",
    [
        b"[]",
        b"[01]",
        b"[-01.5]",
        b"[1.]",
        b"[.5]",
        b"[+1]",
        b"[1e]",
        b"[1e+]",
        b"[-]",
        b"[1,]",
        b"[,1]",
        b"[1 2]",
        b"[1,,2]",
        b"[true]",
        b"[null]",
        b'["1"]',
        b"[[1]]",
        b"[1]x",
        b"1, 2",
        b"[1, 2",
        b"[NaN]",
        b"[Infinity]",
        b"[-Infinity]",
        b"[0x10]",
        b"[1e400]",  # beyond float64
        b"[-1e400]",
        b"[9223372036854775808]",  # an integer array beyond int64: json_bulk tries uint64
        b"[-9223372036854775809]",
        b"[123456789012345678901234567890]",
    ],
)
def test_anything_else_is_refused(text: bytes) -> None:
    assert read(text) is None


def test_bytes_like_inputs_are_read() -> None:
    text = b'{"data": [1.5, -2, 3e2]}'
    start, end = text.index(b"["), text.index(b"]") + 1
    assert read(memoryview(text)[start:end]) == [1.5, -2.0, 300.0]
    assert read(bytearray(text[start:end])) == [1.5, -2.0, 300.0]


def _float_texts(rng: random.Random, n: int) -> list[str]:
    makers = [
        lambda: repr(rng.uniform(-1, 1) * 10.0 ** rng.randint(-40, 40)),
        lambda: str(np.float32(rng.gauss(0, 1))),
        lambda: repr(float(np.frombuffer(rng.randbytes(8), np.float64)[0])),
        lambda: f"{rng.randint(-(10**20), 10**20)}e{rng.randint(-330, 300)}",
        lambda: (
            f"{rng.randint(0, 10 ** rng.randint(1, 25))}.{'0' * rng.randint(0, 12)}"
            f"{rng.randint(0, 10 ** rng.randint(1, 25))}"
        ),
        lambda: f"{rng.uniform(-1e6, 1e6):.{rng.randint(1, 25)}g}",
        lambda: str(rng.randint(-(2**63), 2**63 - 1) >> rng.randint(0, 63)),
    ]
    texts = []
    while len(texts) < n:
        text = rng.choice(makers)()
        if "n" not in text:  # nan / inf from the random bytes: not JSON
            texts.append(text)
    return texts


@pytest.mark.parametrize("seed", range(20))
def test_random_arrays_read_as_python_reads_them(seed: int) -> None:
    rng = random.Random(seed)
    texts = _float_texts(rng, rng.choice([1, 3, 50, 2000]))
    text = ("[" + rng.choice([",", ", ", " ,\n"]).join(texts) + "]").encode()
    expected = json.loads(text)
    if any(isinstance(v, float) and abs(v) == float("inf") for v in expected):
        assert read(text) is None  # a number beyond float64 among them
    else:
        same(read(text), text)


@pytest.mark.parametrize("seed", range(5))
def test_random_integer_arrays_stay_integers(seed: int) -> None:
    rng = random.Random(seed)
    values = [rng.randint(-(2**63), 2**63 - 1) >> rng.randint(0, 63) for _ in range(3000)]
    text = json.dumps(values).encode()
    assert read(text) == values
