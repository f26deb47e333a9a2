"""json_floats (C): a float32 array's JSON text is what orjson writes for it (OPT_SERIALIZE_NUMPY),
byte for byte, with NaN, Infinity and -Infinity where orjson writes null; every value reads back
to the same float32 and has no shorter decimal that would."""

from __future__ import annotations

import json
import math
import warnings

import numpy as np
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rosettaserve.core import json_floats, json_nonfinite

TOKENS = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


def reference(values: np.ndarray) -> bytes:
    """orjson's text, with the tokens json_nonfinite writes for what orjson writes as null."""
    text = orjson.dumps(values, option=orjson.OPT_SERIALIZE_NUMPY)
    if b"null" not in text:
        return text
    tokens = iter(json_nonfinite.token(v) for v in values.ravel() if not math.isfinite(v))
    pieces = text.split(b"null")
    out = [pieces[0]]
    for piece in pieces[1:]:
        out += [next(tokens).encode(), piece]
    return b"".join(out)


def from_bits(bits: np.ndarray) -> np.ndarray:
    return bits.astype(np.uint32).view(np.float32)


def edges() -> np.ndarray:
    """Signed zeros, the subnormals' and normals' ends, every power of two and its neighbours
    (a power of two's interval is narrower below it), every power of ten float32 reaches."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # 10^39 and beyond overflow to inf: kept, as a token
        twos = np.float32(2.0) ** np.arange(-149, 128, dtype=np.float32)
        tens = np.float32(10.0) ** np.arange(-45, 40, dtype=np.float32)
    bits = np.array([0, 1, 2, 0x7FFFFF, 0x800000, 0x800001, 0x7F7FFFFF, 0x7F800000], np.uint64)
    near = [np.nextafter(twos, np.float32(0)), np.nextafter(twos, np.float32(np.inf))]
    magnitudes = np.concatenate([from_bits(bits), twos, *near, tens, [np.nan]])
    return np.concatenate([magnitudes, -magnitudes]).astype(np.float32)


def test_a_million_random_bit_patterns_write_as_orjson_writes_them() -> None:
    rng = np.random.default_rng(20261126)
    values = from_bits(rng.integers(0, 2**32, 1_000_000, dtype=np.uint64))
    assert json_floats.write(values) == reference(values)


@pytest.mark.parametrize("scale", [1e-30, 1e-6, 1.0, 1e6, 1e30])
def test_normal_values_at_every_scale(scale: float) -> None:
    """What models answer: values spread around a scale, every layout (0.000ddd, d.ddd,
    ddd000.0, d.ddde+XX) and the boundaries between them."""
    rng = np.random.default_rng(int(-math.log10(scale)) + 40)
    values = (rng.standard_normal(100_000) * scale).astype(np.float32)
    assert json_floats.write(values) == reference(values)


def test_the_edges_of_float32() -> None:
    values = edges()
    text = json_floats.write(values)
    assert text == reference(values)
    assert text.startswith(b"[0.0,1e-45,3e-45,1.1754942e-38,1.1754944e-38,")
    assert b",-0.0," in text
    assert b",3.4028235e+38,Infinity," in text


def digits_and_exponent(text: bytes) -> tuple[int, int]:
    """A number's text as digits (no leading or trailing zeros) times 10^exponent."""
    mantissa, _, exponent = text.decode().lstrip("-").partition("e")
    whole, _, fraction = mantissa.partition(".")
    digits = (whole + fraction).lstrip("0")
    power = int(exponent or 0) - len(fraction)
    stripped = digits.rstrip("0")
    return int(stripped), power + len(digits) - len(stripped)


def test_each_value_reads_back_and_no_shorter_decimal_would() -> None:
    """Checked without orjson: the text reads back to the same float32, neither decimal of one
    digit less around it does (so none does), and numpy's shortest repr (Dragon4) has as
    many digits."""
    rng = np.random.default_rng(7)
    values = np.concatenate([from_bits(rng.integers(0, 2**32, 20_000, dtype=np.uint64)), edges()])
    values = values[np.isfinite(values) & (values != 0)]
    texts = json_floats.write(values)[1:-1].split(b",")
    for value, text in zip(values.tolist(), texts, strict=True):
        assert np.float32(float(text)) == np.float32(value), text
        digits, exponent = digits_and_exponent(text)
        dragon4 = np.format_float_scientific(np.float32(value), unique=True, trim="-")
        assert len(str(digits)) == len(dragon4.lstrip("-").split("e")[0].replace(".", ""))
        for shorter in (digits // 10, digits // 10 + 1):
            with np.errstate(over="ignore"):  # beyond float32's largest: inf, another value
                back = np.float32(float(f"{shorter}e{exponent + 1}"))
            assert back != np.float32(value), text


@given(st.lists(st.floats(width=32, allow_nan=True, allow_infinity=True), max_size=200))
@settings(max_examples=300, deadline=None, database=None, derandomize=True)
def test_any_list_of_float32_writes_as_orjson_writes_it(values: list[float]) -> None:
    array = np.array(values, dtype=np.float32)
    assert json_floats.write(array) == reference(array)


@pytest.mark.parametrize("shape", [(0,), (1,), (2, 3), (2, 0), (0, 3), (2, 1, 3), (1, 1, 1, 1)])
def test_nested_lists_follow_the_shape(shape: tuple[int, ...]) -> None:
    values = np.arange(math.prod(shape), dtype=np.float32).reshape(shape) - 2.5
    text = json_floats.write(values)
    assert text == orjson.dumps(values, option=orjson.OPT_SERIALIZE_NUMPY)
    assert json.loads(text) == values.tolist()


def test_prefix_and_suffix_frame_the_text() -> None:
    values = np.array([1.5, math.nan, -math.inf], dtype=np.float32)
    text = json_floats.write(values, b'{"data":', bytearray(b"}"))
    assert text == b'{"data":[1.5,NaN,-Infinity]}'
    assert json_floats.write(values[:0], b"", b"") == b"[]"


def test_an_unaligned_array_is_written_too() -> None:
    """A binary tensor at an odd offset of a request body is a float32 array numpy exports as
    "=f" (not aligned): its text is the aligned copy's."""
    values = np.array([0.1, -2.5, math.nan, 3e-41], dtype=np.float32)
    odd = np.frombuffer(memoryview(b"x" + values.tobytes())[1:], dtype=np.float32)
    assert not odd.flags.aligned
    assert json_floats.write(odd) == json_floats.write(values) == reference(values)
    assert (
        json_floats.write(odd.reshape(2, 2), b"[", b"]")
        == b"[" + reference(values.reshape(2, 2)) + b"]"
    )


def test_what_it_does_not_take_is_a_clear_error() -> None:
    with pytest.raises(TypeError, match="float32"):
        json_floats.write(np.zeros(3, dtype=np.float64))
    with pytest.raises(TypeError, match="float32"):
        json_floats.write(np.float32(1.0).reshape(()))  # 0-d
    with pytest.raises(TypeError, match="float32"):
        json_floats.write(b"abcd")
    with pytest.raises(ValueError, match="contiguous"):  # numpy's refusal of the buffer
        json_floats.write(np.zeros((4, 4), dtype=np.float32)[:, ::2])
    with pytest.raises(TypeError):
        json_floats.write()  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        json_floats.write(np.zeros(1, np.float32), b"", b"", b"")  # type: ignore[call-arg]


def test_json_nonfinite_array_uses_it_for_float32_only() -> None:
    """Its Fragment reads back (with the tokens) to the same values; float64 keeps orjson's
    way."""
    values = np.array([[0.1, math.nan], [-0.0, math.inf]], dtype=np.float32)
    fragment = json_nonfinite.array(values)
    assert isinstance(fragment, orjson.Fragment)
    doc = json_nonfinite.loads(orjson.dumps({"data": fragment}))
    back = np.array(doc["data"], dtype=np.float32)
    assert np.array_equal(back, values, equal_nan=True)
    assert np.signbit(back[1, 0])
    wide = np.array([0.1, 2.0])
    assert json_nonfinite.array(wide) is wide
