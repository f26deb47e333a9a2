"""json_numbers (C): a flat JSON array of numbers reads to exactly the values Python's own JSON
reader gives (correctly rounded doubles, bit for bit what float() reads; exact int64); anything
else is declined (None), for simdjson or the ordinary reader to read or report."""

from __future__ import annotations

import json
import random
from fractions import Fraction

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
        b"[-0, 1.5]",  # the integer -0 among floats: +0.0, as json, orjson and simdjson read it
        b"[1.5, -0, -0.0, 0e0, -0e0, -0E+2]",
        b"[0.1, 0.2, 0.3]",
        b"[-0.95217013,1.1003357,0.07547671,-0.0012345678]",  # float32 values as clients send them
        b"[1e-22, 1e22, 1.5e-15, 3.4028235e15]",
        b"[9223372036854775807,-9223372036854775808]",
        b"[1234567890123456789,-123456789]",
        b"[99999999,100000000,12345678901234567]",
        b"[1, 2.5]",  # one float among integers: all floats
        b"[1E5, 1e+5, 1e-5, 2.5E-3]",
        b"[9007199254740992, 900719925474099.2e1]",  # 2^53: still exact
        b"[0.000001234567890123]",
        b"[7]",
        b"[-7.25]",
    ],
)
def test_a_number_array_reads_as_python_reads_it(text: bytes) -> None:
    same(read(text), text)


@pytest.mark.parametrize(
    "text",
    [
        b"[0.1, 0.2, 0.30000000000000004]",  # 17 digits: beyond 2^53, Eisel-Lemire's
        b"[0.12345678901234568, -0.9521701335906982, 1.1003357172012329e-05]",
        b"[1.0, 9007199254740993]",  # 2^53 + 1: halfway, to even
        b"[4.9e-324, 5e-324, 2.4703282292062328e-324, 2.4703282292062327e-324]",  # subnormals
        b"[2.2250738585072011e-308, 2.2250738585072014e-308, 2.225073858507201e-308]",
        b"[1e-324, 1e-400, -1e-400, 0e400, 1e-99999999999999999999]",  # to zero (signed)
        b"[1.7976931348623157e308, 1.7976931348623158e308, 1e308, -1.7976931348623157e308]",
        b"[1e23]",  # beyond the exact powers of ten
        b"[1e-23]",
        b"[3.4028235e38, 1.1754944e-38]",  # float32's extremes: exponents beyond 22
        b"[9007199254740992.0]",  # 17 digits with the zero
        b"[0.000000000000000000001234567890123]",  # leading zeros are not significant
        b"[3.14159265358979323846264338327950288]",  # beyond 19 digits: the first 19 decide
        b"[12345678901234567890123.5, 1.00000000000000000000000000000000000000000]",
        b"[-0.0000000000000000000000000000000000000000, 0.0e-5, -0e0]",
        b"[1.5, 12345678901234567890123]",  # an integer beyond int64 in a float array: a float
        b"[9223372036854775808, 0.5, -9223372036854775809]",
        b"[1000000000000000000000000000000000000000000000000000000000000e-60]",
        b"[9007199254740993000000, 90071992547409930000001e-1]",  # halfway beyond 19 digits
        b"[1.00000000000000011102230246251565404236316680908203125]",  # 1 + 2^-53 exactly
        b"[1.00000000000000011102230246251565404236316680908203125000000001]",  # just above
        b"[0.0000000000000000000000000000000000000001e40, 123456789012345678901e-2]",
    ],
)
def test_a_number_beyond_the_exact_fast_path_reads_as_python_reads_it(text: bytes) -> None:
    same(read(text), text)


def test_halfway_cases_round_to_even_like_python() -> None:
    """Decimals exactly halfway between two neighbouring doubles (up to 770 digits), and a hair
    above or below: where the first 19 digits leave the rounding open, Python's reader decides."""
    rng = random.Random(7)
    texts = []
    for _ in range(400):
        x = abs(float(np.frombuffer(rng.randbytes(8), np.float64)[0]))
        y = float(np.nextafter(x, np.inf))
        if not np.isfinite(y) or x == 0:
            continue
        half = (Fraction(x) + Fraction(y)) / 2
        shift = half.denominator.bit_length() - 1  # a power of two: 5^shift makes it whole
        digits = str(half.numerator * 5**shift)
        for tail, exponent in (("", -shift), ("1", -shift - 1), ("0", -shift - 1)):
            texts.append(f"{digits}{tail}e{exponent}")
        below = str(half.numerator * 5**shift - 1)
        texts.append(f"{below}9e{-shift - 1}")
    for start in range(0, len(texts), 50):
        text = _array(rng, texts[start : start + 50])
        same(read(text), text)


def test_random_doubles_and_digit_strings_read_as_float_reads_them() -> None:
    """~300,000 numbers: every double's repr, float32 values widened, digit strings of 1-40
    digits with a point anywhere and exponents from -360 to 330, all with either sign; after a
    first number with a long fraction and after a short one."""
    rng = random.Random(11)
    np_rng = np.random.default_rng(11)
    doubles = np_rng.integers(0, 2**64, 60_000, dtype=np.uint64).view(np.float64)
    texts = [repr(v) for v in doubles.tolist() if np.isfinite(v)]
    texts += [repr(v) for v in np_rng.random(60_000, dtype=np.float32).astype(float).tolist()]
    texts += [repr(v) for v in np_rng.standard_normal(60_000).astype(np.float32).tolist()]
    for _ in range(120_000):
        digits = "".join(rng.choices("0123456789", k=rng.randint(1, 40)))
        point = rng.randint(0, len(digits))
        whole = digits[:point].lstrip("0") or "0"
        text = whole + ("." + digits[point:] if point < len(digits) else "")
        if rng.random() < 0.6:
            text += rng.choice("eE") + rng.choice(["", "+", "-"]) + str(rng.randint(0, 360))
        texts.append(rng.choice(["", "-"]) + text)
    rng.shuffle(texts)
    for start in range(0, len(texts), 5000):
        chunk = [t for t in texts[start : start + 5000] if abs(float(t)) != float("inf")]
        # the first number picks the reader's copy for long fractions or for float32 texts
        chunk.insert(0, ["0.12345678901234568", "0.5"][start // 5000 % 2])
        text = ("[" + ",".join(chunk) + ",0.5]").encode()
        got = json_numbers.read(text)
        assert got is not None
        values, is_float = got
        assert is_float
        # an integer widens as json.loads reads it: "-0" is the integer 0, +0.0
        expected = np.array([float(int(t)) if t.lstrip("-").isdigit() else float(t) for t in chunk])
        expected = np.append(expected, 0.5)
        assert values == bytearray(expected.tobytes())


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


_TAIL = ", 1.25, -2.5, 3.75, 4.125"  # 16 bytes and more after the number: the d.ddd path


@pytest.mark.parametrize(
    "number",
    [
        "-0.0", "0.0", "0.00000000", "-0.00000000", "9.99999999", "-9.99999999", "5.0",
        "1.5e3", "1.5E+3", "-9.99999999e-5", "1.123456789", "1.1234567890123456",
        "0.5", "-0.5", "7.1", "3.14159265", "-1.00000001", "1.25 ", "1.25\n",
    ],
)  # fmt: skip
def test_one_digit_texts_far_from_the_end_read_as_python_reads_them(number: str) -> None:
    """One integer digit, a point, then digits, with 16 bytes of text after it (the reader's
    shorter path for float32 texts), in both copies of the reader (first number short or long)
    and as the last of several: json.loads's values, bit for bit."""
    for text in (
        f"[{number}{_TAIL}]",
        f"[0.12345678901234568, {number}{_TAIL}]",
        f"[2.5,{number}]",
    ):
        same(read(text.encode()), text.encode())
        single = json_numbers.read_single(text.encode())
        assert single is not None
        wide = np.float64(json.loads(text)).astype(np.float32)
        assert np.frombuffer(single[0], dtype=np.float32).tobytes() == wide.tobytes()


@pytest.mark.parametrize("number", ["1.", "-1.", "1.e5", "1.5.5", "1.5x", "1.5-", "01.5", "-.5"])
def test_malformed_one_digit_texts_far_from_the_end_are_refused(number: str) -> None:
    text = f"[{number}{_TAIL}]".encode()
    assert read(text) is None
    assert json_numbers.read_single(text) is None


def test_bytes_like_inputs_are_read() -> None:
    text = b'{"data": [1.5, -2, 3e2]}'
    start, end = text.index(b"["), text.index(b"]") + 1
    assert read(memoryview(text)[start:end]) == [1.5, -2.0, 300.0]
    assert read(bytearray(text[start:end])) == [1.5, -2.0, 300.0]


def _exact_texts(rng: random.Random, n: int) -> list[str]:
    """Numbers within the exact fast path: float32 values as clients write them, and decimals
    of up to 15 significant digits with exponents up to 22 either way."""
    makers = [
        lambda: str(np.float32(rng.gauss(0, 1))),
        lambda: str(np.float32(rng.uniform(-1, 1) * 10.0 ** rng.randint(-7, 7))),
        lambda: f"{rng.uniform(-1e6, 1e6):.{rng.randint(1, 15)}g}",
        lambda: f"{rng.randint(-(10**15), 10**15)}e{rng.randint(-22, 7)}",
        lambda: f"{rng.randint(0, 10**4)}.{'0' * rng.randint(0, 3)}{rng.randint(0, 10**7)}",
        lambda: str(rng.randint(-(2**53), 2**53)),
    ]
    return [rng.choice(makers)() for _ in range(n)]


def _any_texts(rng: random.Random, n: int) -> list[str]:
    """Any JSON number, most beyond the fast path."""
    makers = [
        lambda: repr(rng.uniform(-1, 1) * 10.0 ** rng.randint(-40, 40)),
        lambda: repr(float(np.frombuffer(rng.randbytes(8), np.float64)[0])),
        lambda: f"{rng.randint(-(10**20), 10**20)}e{rng.randint(-330, 300)}",
        lambda: (
            f"{rng.randint(0, 10 ** rng.randint(1, 25))}.{'0' * rng.randint(0, 12)}"
            f"{rng.randint(0, 10 ** rng.randint(1, 25))}"
        ),
        lambda: f"{rng.uniform(-1e6, 1e6):.{rng.randint(1, 25)}g}",
    ]
    texts = []
    while len(texts) < n:
        text = rng.choice(makers)()
        if "n" not in text:  # nan / inf from the random bytes: not JSON
            texts.append(text)
    return texts


def _array(rng: random.Random, texts: list[str]) -> bytes:
    return ("[" + rng.choice([",", ", ", " ,\n"]).join(texts) + "]").encode()


@pytest.mark.parametrize("seed", range(20))
def test_random_exact_arrays_read_as_python_reads_them(seed: int) -> None:
    rng = random.Random(seed)
    text = _array(rng, _exact_texts(rng, rng.choice([1, 3, 50, 2000])))
    same(read(text), text)


@pytest.mark.parametrize("seed", range(20))
def test_random_arrays_are_read_exactly_or_declined(seed: int) -> None:
    """Never a wrong value: with numbers beyond the fast path among them, None or exact."""
    rng = random.Random(seed)
    texts = _exact_texts(rng, 50) + _any_texts(rng, rng.choice([1, 3, 50]))
    rng.shuffle(texts)
    text = _array(rng, texts)
    got = read(text)
    if got is not None:
        same(got, text)


@pytest.mark.parametrize("seed", range(5))
def test_random_integer_arrays_stay_integers(seed: int) -> None:
    rng = random.Random(seed)
    values = [rng.randint(-(2**63), 2**63 - 1) >> rng.randint(0, 63) for _ in range(3000)]
    text = json.dumps(values).encode()
    assert read(text) == values


_MUTATION_SEEDS = [
    "[1,2,3]",
    "[-0.95217013, 1e5, 0.5]",
    "[12345678901234567890]",
    "[-9223372036854775808,9223372036854775807]",
    "[0.12345678,-1.5e-3,3E+2]",
    "[1.2345678901234567,2]",
    "[-0.0, 0]",
    "[1234567.12345678, 0.00000001]",
]


def _mutated(rng: random.Random) -> bytes:
    """A seed array with up to five characters inserted, deleted or replaced, maybe cut short."""
    chars = list(rng.choice(_MUTATION_SEEDS))
    for _ in range(rng.randrange(6)):
        at = rng.randrange(len(chars) + 1)
        op, char = rng.randrange(3), rng.choice("0123456789-+.eE[], \t\n")
        if op == 0:
            chars.insert(at, char)
        elif at < len(chars):
            chars[at : at + 1] = [] if op == 1 else [char]
    text = "".join(chars).encode()
    return text[: rng.randrange(len(text) + 1)] if rng.random() < 0.25 else text


@pytest.mark.parametrize("seed", range(4))
def test_mutated_arrays_are_read_as_python_reads_them_or_declined(seed: int) -> None:
    """Near-misses of valid arrays (a sign, a dot or an exponent moved, a comma or bracket lost):
    whatever the reader takes is valid JSON, read bit for bit as Python reads it."""
    rng = random.Random(seed)
    taken = 0
    for _ in range(5000):
        text = _mutated(rng)
        got = read(text)
        if got is not None:
            same(got, text)  # json.loads raises on anything that is not JSON
            taken += 1
    assert taken > 500  # the mutations leave many arrays valid: the comparison ran
