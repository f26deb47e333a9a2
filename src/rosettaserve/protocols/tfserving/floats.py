"""Float text exactly as TensorFlow Serving writes it, vectorized.

TF writes a float as ``%g`` (6 significant digits) when that text reads back as the same value,
else with 9 (float) or 17 (double) digits; a text without ``.`` or ``e`` gets ``.0`` appended;
NaN and infinities are the bare tokens ``NaN``, ``Infinity``, ``-Infinity``.

Formatting 262144 floats one by one in Python takes ~350 ms (~1.2 s when most need scientific
notation), so the array writer works in numpy: it rounds every value to the decimal TF prints
(6 or 9 digits; exact float64 arithmetic where TF uses fixed notation) and lets orjson write
those float64 values, whose shortest text is exactly TF's digits. Where TF uses scientific
notation orjson writes the mantissa ``d.ddd`` and the exponent ``e-05`` is spliced in after it,
all at once. Only non-finite values and the rare undecidable roundings are formatted one by one.

Doubles that need more than 6 digits are written with their shortest round-trip text (TF: 17
digits, e.g. ``0.33333333333333331`` where we write ``0.3333333333333333``; same value).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import orjson

from rosettaserve.core import json_nonfinite

_NUMPY = orjson.OPT_SERIALIZE_NUMPY
_TIE = 1e-6  # |fraction - 0.5| below this: the rounding is decided one by one, exactly
_COMMA, _OPEN, _CLOSE = ord(","), ord("["), ord("]")


def float_text(value: float, single: bool) -> str:
    """One value as TF writes it (``single``: the value is a float32)."""
    if not math.isfinite(value):
        return json_nonfinite.token(value)  # the tokens every JSON protocol here writes
    text = f"{value:g}"
    if not _reads_back(text, value, single):
        text = f"{value:.9g}" if single else f"{value:.17g}"
    if "." not in text and "e" not in text:
        text += ".0"
    return text


def _reads_back(text: str, value: float, single: bool) -> bool:
    if single:
        return bool(np.float32(float(text)) == np.float32(value))
    return float(text) == value


def array_json(arr: np.ndarray) -> bytes:
    """A float32/float64 array as nested JSON lists of TF float text."""
    if arr.ndim == 0:
        return float_text(float(arr), arr.dtype == np.float32).encode()
    return _render(arr)


def array_rows_json(arr: np.ndarray) -> list[bytes]:
    """``array_json`` of each ``arr[i]`` (rank >= 1), sliced from one rendering."""
    if arr.shape[0] == 0:
        return []
    if arr.ndim > 1 and arr[0].size == 0:
        return [array_json(arr[0])] * arr.shape[0]
    text = _render(arr)
    starts, ends = _tokens(text)
    if arr.ndim == 1:
        return [text[s:e] for s, e in zip(starts.tolist(), ends.tolist(), strict=True)]
    per_row, pad = arr[0].size, arr.ndim - 1
    firsts = starts[::per_row] - pad
    lasts = ends[per_row - 1 :: per_row] + pad
    return [text[s:e] for s, e in zip(firsts.tolist(), lasts.tolist(), strict=True)]


@dataclass(slots=True)
class _Plan:
    """What orjson writes (``values``: TF's digits, in fixed notation) and what is fixed after."""

    values: np.ndarray  # float64
    sci: list[np.ndarray] = field(default_factory=list)  # positions holding a mantissa d.ddd ...
    exponents: list[np.ndarray] = field(default_factory=list)  # ... whose text gets e±XX
    whole: list[np.ndarray] = field(default_factory=list)  # positions written by float_text

    def add_sci(self, index: np.ndarray, mantissa: np.ndarray, exponent: np.ndarray) -> None:
        self.values[index] = np.copysign(mantissa, self.values[index])
        self.sci.append(index)
        self.exponents.append(exponent.astype(np.int64))

    def positions(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Mantissa positions (in order) with their exponents, and the whole positions."""
        sci, exponents = _joined(self.sci), _joined(self.exponents)
        order = np.argsort(sci)
        return sci[order], exponents[order], np.sort(_joined(self.whole))


def _joined(parts: list[np.ndarray]) -> np.ndarray:
    return np.concatenate(parts).astype(np.int64) if parts else np.empty(0, dtype=np.int64)


def _render(arr: np.ndarray) -> bytes:
    single = arr.dtype == np.float32
    flat = np.ascontiguousarray(arr).reshape(-1)
    plan = _plan32(flat) if single else _plan64(flat)
    text = orjson.dumps(plan.values.reshape(arr.shape), option=_NUMPY)
    if not any(part.size for part in (*plan.sci, *plan.whole)):
        return text
    return _splice(text, plan, flat, single)


def _splice(text: bytes, plan: _Plan, flat: np.ndarray, single: bool) -> bytes:
    sci, exponents, whole = plan.positions()
    if sci.size:
        text = _add_exponents(text, sci, exponents)
    if whole.size:
        text = _replace(text, whole, flat, single)
    return text


def _add_exponents(text: bytes, positions: np.ndarray, exponents: np.ndarray) -> bytes:
    """``d.ddd`` -> ``d.ddde-05``, ``d.0`` -> ``de-05``: one scatter for all of them."""
    ends = _tokens(text)[1][positions]
    buf = np.frombuffer(bytearray(text), dtype=np.uint8)
    suffix = _EXPONENTS[exponents + _EXP_OFFSET]
    integral = (buf[ends - 1] == ord("0")) & (buf[ends - 2] == ord("."))
    buf[ends[integral] - 2] = suffix[integral, 0]  # ".0" becomes "e-" ...
    buf[ends[integral] - 1] = suffix[integral, 1]
    inserted = np.ones(suffix.shape, dtype=bool)
    inserted[integral, :2] = False  # ... and only "05" is inserted
    at = np.repeat(ends, inserted.sum(axis=1))  # sorted already (np.insert would sort again)
    out = np.empty(buf.size + at.size, dtype=np.uint8)
    placed = at + np.arange(at.size)
    out[placed] = suffix[inserted]
    rest = np.ones(out.size, dtype=bool)
    rest[placed] = False
    out[rest] = buf
    return out.tobytes()


def _replace(text: bytes, positions: np.ndarray, flat: np.ndarray, single: bool) -> bytes:
    """The few tokens formatted one by one: non-finite values, undecidable roundings."""
    starts, ends = (offsets[positions] for offsets in _tokens(text))
    pieces, previous = [], 0
    values = flat[positions].tolist()
    for start, end, value in zip(starts.tolist(), ends.tolist(), values, strict=True):
        pieces += [text[previous:start], float_text(value, single).encode()]
        previous = end
    pieces.append(text[previous:])
    return b"".join(pieces)


_EXP_OFFSET = 99  # exponents -99 .. 99: e-99 .. e+99, four bytes each
_EXPONENTS = np.frombuffer(
    b"".join(f"e{x:+03d}".encode() for x in range(-_EXP_OFFSET, _EXP_OFFSET + 1)), dtype=np.uint8
).reshape(-1, 4)

# 10**k as (multiplier, divisor), both exact, for k = -_K .. _K: a * mul / div rounds once.
_K = 22
_MUL = np.concatenate([np.ones(_K), 10.0 ** np.arange(_K + 1)])
_DIV = np.concatenate([10.0 ** np.arange(_K, 0, -1), np.ones(_K + 1)])


def _exponent(a: np.ndarray, low: int, high: int) -> tuple[np.ndarray, np.ndarray]:
    """floor(log10(a)) clipped to [low, high] (as float), and where it was inside."""
    e = np.log10(a)
    np.floor(e, out=e)
    clipped = np.clip(e, low, high)
    return clipped, e == clipped


def _index(k: np.ndarray) -> np.ndarray:
    """Table positions of the exponents ``k`` (NaN from non-finite values: any valid one)."""
    return np.clip(k.astype(np.int8) + _K, 0, 2 * _K)


def _scaled(x: np.ndarray, k: np.ndarray) -> np.ndarray:
    """``x * 10**k`` for |k| <= 66, in three exact steps: three roundings at most."""
    for _ in range(3):
        step = np.clip(k, -_K, _K)
        index = _index(step)
        x = x * _MUL[index] / _DIV[index]
        k = k - step
        if not k.any():
            break
    return x


def _normalized(m: np.ndarray, top: Any, e: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A rounded mantissa that carried over (9.999996 -> 10.0000) back to P digits."""
    carry = m >= top
    return np.where(carry, m / 10, m), e + carry


def _plan32(flat: np.ndarray) -> _Plan:
    """float32: TF's 6- or 9-digit decimal of each value. Where TF prints fixed notation this is
    exact: ``a * 10**k9`` (a 24-bit mantissa times 5**12 at most) fits in 53 bits, and the 6-digit
    ``a * 10**k9 / 1000`` is exact where representable, else one rounding that cannot fake a
    rounding tie. Other magnitudes go through ``_outside32``. Few full-size temporaries: each
    new one costs page faults."""
    with np.errstate(all="ignore"):
        a32 = np.abs(flat)
        a = a32.astype(np.float64)
        e, fixed = _exponent(a, -4, 8)
        p9 = _MUL[_index(8 - e)]
        q9 = a * p9
        m6 = q9 / 1000
        np.rint(m6, out=m6)
        y6 = m6 * 1000
        y6 /= p9
        same6 = y6.astype(np.float32) == a32
        value = np.rint(q9, out=q9)
        value /= p9  # the 9-digit decimal ...
        np.copyto(value, y6, where=same6)  # ... unless 6 digits read back
        np.copysign(value, flat, out=value)
        plan = _Plan(value)
        big = np.abs(value) >= 1e6
        big &= fixed
        _sci32(plan, np.flatnonzero(big), a=a, p9=p9, e=e, same6=same6)
        finite = np.isfinite(a)
        plan.whole.append(np.flatnonzero(~finite | (fixed & (m6 < 1e5))))
        _outside32(plan, np.flatnonzero(~fixed & finite & (a != 0)), flat)
    return plan


def _sci32(
    plan: _Plan, index: np.ndarray, *, a: np.ndarray, p9: np.ndarray, e: np.ndarray, same6: Any
) -> None:
    """Fixed-range float32 values TF still writes in scientific notation (exponent >= digits)."""
    if not index.size:
        return
    q9, six = a[index] * p9[index], same6[index]
    top = np.where(six, 1e6, 1e9)
    m, exponent = _normalized(np.where(six, np.rint(q9 / 1000), np.rint(q9)), top, e[index])
    sci = exponent >= np.where(six, 6, 9)
    plan.add_sci(index[sci], (m / (top / 10))[sci], exponent[sci])


def _outside32(plan: _Plan, index: np.ndarray, flat: np.ndarray) -> None:
    """float32 magnitudes below 1e-4 or from 1e9: TF writes them in scientific notation. The
    decimal comes from float64 approximations (three roundings at most); where it could be off
    (a rounding tie, or a read-back too close to call) the value is formatted by hand."""
    if not index.size:
        return
    a32 = np.abs(flat[index])
    a = a32.astype(np.float64)
    e = np.floor(np.log10(a))
    q9 = _scaled(a, 8 - e)
    m9, m6 = np.rint(q9), np.rint(q9 / 1000)
    near = (np.abs(np.abs(q9 - m9) - 0.5) < _TIE) | (np.abs(np.abs(q9 / 1000 - m6) - 0.5) < _TIE)
    same6, unsure = _reads_back32(_scaled(m6, e - 5), a32)
    m6, e6 = _normalized(m6, 1e6, e)
    m9, e9 = _normalized(m9, 1e9, e)
    exponent = np.where(same6, e6, e9)
    sci = (exponent < -4) | (exponent >= np.where(same6, 6, 9))
    sure = sci & ~near & ~unsure & (np.where(same6, m6, m9 / 1000) >= 1e5)
    mantissa = np.where(same6, m6 / 1e5, m9 / 1e8)
    plan.add_sci(index[sure], mantissa[sure], exponent[sure])
    plan.whole.append(index[~sure])


def _reads_back32(y: np.ndarray, a32: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Does the decimal approximated by ``y`` (relative error < 8e-16) read back as ``a32``?
    And is ``y`` too close to a float32 rounding boundary of ``a32`` to tell?"""
    a = a32.astype(np.float64)
    up = np.nextafter(a32, np.float32(np.inf)).astype(np.float64)
    down = np.nextafter(a32, np.float32(0)).astype(np.float64)
    margin = np.abs(y) * 8e-16
    unsure = (np.abs(y - (a + up) / 2) <= margin) | (np.abs(y - (a + down) / 2) <= margin)
    return y.astype(np.float32) == a32, unsure


def _plan64(flat: np.ndarray) -> _Plan:
    """float64: TF's 6-digit decimal where it reads back, else the value's shortest text."""
    with np.errstate(all="ignore"):
        a = np.abs(flat)
        e, fixed = _exponent(a, -4, 15)
        index = _index(5 - e)
        mul, div = _MUL[index], _DIV[index]
        q6 = a * mul / div
        m6 = np.rint(q6)
        y6 = m6 / mul * div
        tie = np.abs(np.abs(q6 - m6) - 0.5) < _TIE  # q6 may be inexact: decide by hand
        same6 = y6 == a
        plan = _Plan(np.copysign(np.where(same6, y6, a), flat))
        whole = (~fixed | tie | (m6 < 1e5)) & (a != 0)
        sci = np.flatnonzero(fixed & same6 & (y6 >= 1e6) & ~whole)
        m, exponent = _normalized(m6[sci], 1e6, e[sci])
        plan.add_sci(sci, m / 1e5, exponent)
        plan.whole.append(np.flatnonzero(whole))
    return plan


def _tokens(text: bytes) -> tuple[np.ndarray, np.ndarray]:
    """Start and end offsets of every number in compact nested-list JSON text."""
    buf = np.frombuffer(text, dtype=np.uint8)
    inside = ((buf != _COMMA) & (buf != _OPEN) & (buf != _CLOSE)).view(np.int8)
    edges = np.diff(inside, prepend=np.int8(0), append=np.int8(0))
    return np.flatnonzero(edges == 1), np.flatnonzero(edges == -1)
