"""docs/model-yaml.md is what scripts/gen_config_doc.py makes of the declaration today."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

from tests.conftest import load_module

ROOT = Path(__file__).resolve().parents[2]


def _script() -> ModuleType:
    return load_module("gen_config_doc", ROOT / "scripts" / "gen_config_doc.py")


def test_the_reference_page_is_up_to_date() -> None:
    page = ROOT / "docs" / "model-yaml.md"
    assert page.read_text() == _script().render(), "run python scripts/gen_config_doc.py"


def test_the_page_names_every_declared_key_and_runtime() -> None:
    from rosettaserve.repository.declare import rows
    from rosettaserve.repository.model_yaml import MODEL_YAML, RUNTIMES

    text = _script().render()
    for row in rows(MODEL_YAML):
        assert f"| `{row.path}` |" in text
    for runtime in RUNTIMES.values():
        assert f"### `parameters` of `runtime: {runtime.name}`" in text
    assert "→ `unknown key max_batch_sise: did you mean max_batch_size?`" in text
