"""Every fuzz target, bounded: its seeds and regressions replayed, then atheris for a few
seconds from them (FUZZ_TEST_SECONDS each, default 6; ``make fuzz`` runs long). A failure
prints the input that failed and where libFuzzer saved it (build/fuzz/crashes/)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.fuzz.run import HERE, run_target
from tests.fuzz.targets import TARGETS

SECONDS = float(os.environ.get("FUZZ_TEST_SECONDS", "6"))


@pytest.mark.parametrize("target", TARGETS)
def test_target_holds_under_fuzzing(target: str, tmp_path: Path) -> None:
    assert run_target(target, SECONDS, None, tmp_path) == 0, f"fuzz target {target} failed"


def test_every_target_has_seeds() -> None:
    for target in TARGETS:
        seeds = list((HERE / "corpus" / target).iterdir())
        assert seeds, f"no seed corpus for {target} (python -m tests.fuzz.make_corpus)"
