"""docs/configuration.md lists every flag the parser has, as the parser has it."""

from __future__ import annotations

import subprocess
import sys

from rosettaserve.cli.parser import build_parser
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


def test_help_says_what_the_server_is_with_an_example() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "rosettaserve", "--help"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    for name in ("Open Inference Protocol", "TensorFlow Serving", "grps", "OpenAI", "TGI"):
        assert name in done.stdout, name
    for name in ("vLLM", "Triton", "MindIE", "prefill", "/metrics", "status page"):
        assert name in done.stdout, name
    assert "examples:\n  rosettaserve serve examples/models\n" in done.stdout


def test_the_examples_in_the_help_parse() -> None:
    from rosettaserve.cli import help as cli_help

    parser = build_parser()
    parsed = 0
    for text in (cli_help.EPILOG, cli_help.SERVE_EPILOG, cli_help.SCHEDULER_EPILOG):
        for line in text.replace("\\\n", " ").splitlines():
            words = line.split("#")[0].replace(" &", " ").split()
            if words[:1] == ["rosettaserve"] and "--help" not in words:
                parser.parse_args(words[1:])
                parsed += 1
    assert parsed >= 7
