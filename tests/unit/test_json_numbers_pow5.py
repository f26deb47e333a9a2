"""core/json_numbers_pow5.h is what scripts/gen_pow5_table.py writes: 5^q to 128 bits."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

from tests.conftest import load_module

ROOT = Path(__file__).resolve().parents[2]


def _script() -> ModuleType:
    return load_module("gen_pow5_table", ROOT / "scripts" / "gen_pow5_table.py")


def test_the_table_is_up_to_date() -> None:
    header = ROOT / "src" / "rosettaserve" / "core" / "json_numbers_pow5.h"
    assert header.read_text() == _script().render(), "run python scripts/gen_pow5_table.py"


def test_each_entry_is_the_power_normalized_to_128_bits() -> None:
    """Positive powers truncated; negative ones the reciprocal within one unit (rounded up where
    5^-q < 2^64, truncated from a wider quotient below), all scaled to [2^127, 2^128)."""
    script = _script()
    for q in range(script.SMALLEST_Q, script.LARGEST_Q + 1):
        value = script.power_of_five_128(q)
        assert 1 << 127 <= value < 1 << 128, q
        if q >= 0:
            exact = 5**q
            shift = exact.bit_length() - 128
            truncated = exact >> shift if shift > 0 else exact << -shift
            assert value == truncated, q
        else:
            power = 5**-q
            scale = 127 + power.bit_length()  # 2^scale / 5^-q lands in [2^127, 2^128)
            assert abs(value * power - (1 << scale)) <= power, q
            if q >= -27:
                assert value == (1 << scale) // power + 1, q
