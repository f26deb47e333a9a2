"""json_numbers.read_single (an FP32 tensor's data read as float32 straight away) gives bit for
bit what the float64 read then numpy's cast to float32 gives (the same two roundings), and falls
back to float64 where that cast overflows, so the range error stays the same."""

from __future__ import annotations

import numpy as np
import pytest

from rosettaserve.core import json_bulk, json_numbers


def text_of(values: list[str]) -> bytes:
    return ("[" + ",".join(values) + "]").encode()


def check_like_the_cast(text: bytes) -> None:
    wide = json_numbers.read(text)
    single = json_numbers.read_single(text)
    assert wide is not None
    assert single is not None
    values, is_float = wide
    assert is_float
    expected = np.frombuffer(values, dtype=np.float64)
    with np.errstate(over="ignore"):
        narrowed = expected.astype(np.float32)
    buffer, code = single
    if np.isinf(narrowed).any():  # a finite value beyond float32: the floats as read
        assert code == "d"
        assert bytes(buffer) == bytes(values)
        return
    assert code == "f"
    assert np.frombuffer(buffer, dtype=np.float32).tobytes() == narrowed.tobytes()


def halfway_texts(rng: np.random.Generator, n: int) -> list[str]:
    """Doubles halfway between two float32 values, a double's ulp either side, and decimals of
    8 to 10 digits near them (where rounding twice, first to double, decides)."""
    bits = rng.integers(0x00000001, 0x7F7FFFFF, n, dtype=np.uint32)
    low = bits.view(np.float32).astype(np.float64)
    high = (bits + 1).view(np.float32).astype(np.float64)
    half = (low + high) / 2  # exact: a float32's 24 bits and one more fit in a double
    texts = []
    for h in half.tolist():
        below, above = float(np.nextafter(h, 0.0)), float(np.nextafter(h, np.inf))
        texts += [repr(h), repr(below), repr(above)]
        texts += [f"{h:.8g}", f"{h:.9g}", f"{h:.10g}"]
    return texts


@pytest.mark.parametrize("widened", [False, True])
def test_read_single_is_the_cast_of_read_on_a_million_values(widened: bool) -> None:
    """Float32 values as numpy prints them (the short copy of the reader) and widened to a
    double's repr as Python clients send them (the long copy), with a minus sign and without."""
    rng = np.random.default_rng(29 + widened)
    for _ in range(4):
        x = (rng.standard_normal(262_144) * rng.choice([1e-3, 1.0, 1e3])).astype(np.float32)
        texts = [repr(v) for v in x.astype(np.float64).tolist()] if widened else list(map(str, x))
        check_like_the_cast(text_of(texts))


def test_read_single_rounds_halfway_cases_as_the_cast_does() -> None:
    rng = np.random.default_rng(4)
    for first in ("0.5", "0.12345678901234568"):  # each copy of the reader reads them
        texts = halfway_texts(rng, 60_000)
        check_like_the_cast(text_of([first, *texts]))
        check_like_the_cast(text_of([first, *("-" + t for t in texts)]))


EDGES = [
    "3.4028235e38",  # FP32's largest as printed: kept
    "3.4028234663852886e38",  # FLT_MAX exactly
    "3.4028235677973362e38",  # just under halfway to 2^128: FLT_MAX
    "3.4028235677973366e38",  # halfway: rounds to even, past FLT_MAX: beyond float32
    "3.4028236e38",
    "1e39",
    "1e308",
    "1.4e-45",  # the smallest subnormal
    "7.006492321624085e-46",  # half of it: rounds to even, 0
    "7.006492321624087e-46",  # just over half: the smallest subnormal
    "1.1754942e-38",  # the largest subnormal
    "1.17549435e-38",  # the smallest normal
    "1e-50",
    "0.0",
]


@pytest.mark.parametrize("edge", EDGES)
@pytest.mark.parametrize("sign", ["", "-"])
@pytest.mark.parametrize("first", ["0.5", "0.12345678901234568"])
def test_read_single_at_float32s_edges(edge: str, sign: str, first: str) -> None:
    text = text_of([first, sign + edge, "1.25"])
    check_like_the_cast(text)
    single = json_numbers.read_single(text)
    assert single is not None
    beyond = float(edge) >= 3.4028235677973366e38  # halfway from FLT_MAX to 2^128, or more
    assert single[1] == ("d" if beyond else "f")


def test_read_single_keeps_integers_and_declines_as_read_does() -> None:
    integers = json_numbers.read(b"[1, -2, 3]")
    assert integers is not None
    assert json_numbers.read_single(b"[1, -2, 3]") == (integers[0], "q")
    for text in (b"[1, 2", b"[1, true]", b"[18446744073709551616, 1]", b"[1e400, 0.5]", b"{}"):
        assert json_numbers.read_single(text) is None
        assert json_numbers.read(text) is None
    got = json_numbers.read_single(b"[18446744073709551616, 0.5]")  # beyond int64 among floats
    assert got is not None
    assert got[1] == "f"
    assert np.frombuffer(got[0], dtype=np.float32).tolist() == [2.0**64, 0.5]


def test_an_fp32_tensors_bulk_array_is_float32_and_others_are_not() -> None:
    text = memoryview(text_of(["0.5", "-1.25", "3.4028235e38"]))
    assert json_bulk.read_array(text, single=True).dtype == np.float32  # type: ignore[union-attr]
    assert json_bulk.read_array(text).dtype == np.float64  # type: ignore[union-attr]
    wide = memoryview(text_of(["0.5", "1e39"]))
    assert json_bulk.read_array(wide, single=True).dtype == np.float64  # type: ignore[union-attr]
