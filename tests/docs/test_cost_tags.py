"""Measured costs live in bench/RESULTS.md ("Costs at their sites"), not in the source: a comment
that explains a choice by what it saved carries a ``[cost: TAG]`` whose row there gives the figure
and how it was measured."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src" / "rosettaserve"
RESULTS = ROOT / "bench" / "RESULTS.md"
TAG = re.compile(r"\[cost: ([a-z0-9-]+)\]")
ROW = re.compile(r"^\| `([a-z0-9-]+)` \|", re.MULTILINE)
FIGURE = re.compile(r"\b\d[\d,.]*k? instructions\b|\d µs|\b\d+(\.\d+)? us\b")


def source_tags() -> dict[str, list[str]]:
    tags: dict[str, list[str]] = {}
    for path in sorted(SRC.rglob("*.py")):
        for tag in TAG.findall(path.read_text()):
            tags.setdefault(tag, []).append(str(path.relative_to(SRC)))
    return tags


def table() -> set[str]:
    text = RESULTS.read_text()
    section = text[text.index("## Costs at their sites") :]
    section = section[: section.index("\n## ", 1)]
    return set(ROW.findall(section))


def test_every_tag_in_the_source_has_its_row() -> None:
    tags = source_tags()
    assert len(tags) >= 20  # the scan really found the tags
    assert set(tags) - table() == set()


def test_every_row_is_a_tag_some_source_carries() -> None:
    assert table() - set(source_tags()) == set()


def test_no_source_comment_cites_a_measured_figure() -> None:
    cited = [
        f"{path.relative_to(SRC)}:{number}"
        for path in sorted(SRC.rglob("*.py"))
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if FIGURE.search(line)
    ]
    assert cited == []
