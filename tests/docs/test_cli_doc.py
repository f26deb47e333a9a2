"""docs/configuration.md lists every flag the parser has, as the parser has it."""

from __future__ import annotations

import subprocess
import sys

from rosettaserve.cli import build_parser
from tests.docs.blocks import ROOT

SCRIPT = ROOT / "scripts" / "gen_cli_doc.py"


def test_the_flag_tables_are_not_stale() -> None:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--check"],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr


def test_every_flag_is_on_the_page() -> None:
    page = (ROOT / "docs" / "configuration.md").read_text()
    parser = build_parser()
    commands = next(a for a in parser._actions if a.dest == "command")
    assert commands.choices is not None
    for sub in dict(commands.choices).values():
        for action in sub._actions:
            for option in action.option_strings:
                if option.startswith("--") and option != "--help":
                    assert f"`{option}" in page, option
