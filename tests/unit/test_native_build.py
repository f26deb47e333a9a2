"""The request path runs compiled: each module scripts/compile_native.py lists is imported from
the extension module it built (with mypyc, or from C), and that build is newer than its source
(an edit made since would otherwise be silently ignored: the extension module shadows the .py)."""

from __future__ import annotations

import importlib
import importlib.util
import sysconfig
from pathlib import Path

import pytest

from tests.conftest import load_module

ROOT = Path(__file__).resolve().parents[2]


SCRIPT = load_module("compile_native", ROOT / "scripts" / "compile_native.py")
MODULES: list[str] = SCRIPT.MODULES + SCRIPT.C_MODULES


@pytest.mark.parametrize("source", MODULES)
def test_a_listed_module_is_imported_compiled_and_up_to_date(source: str) -> None:
    name = SCRIPT.module_name(source)
    module = importlib.import_module(name)
    loaded = Path(module.__file__ or "")
    assert loaded.name.endswith(sysconfig.get_config_var("EXT_SUFFIX")), (
        f"{name} was imported from {loaded.name}, not compiled: run `make native`"
    )
    for path in SCRIPT.sources_of(source):  # a C module's headers too
        assert loaded.stat().st_mtime >= path.stat().st_mtime, (
            f"{path.name} changed after {loaded.name} was built: run `make native`"
        )
