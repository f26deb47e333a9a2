"""The README and docs/ hang together: the README starts with the two commands and stays short,
every page is on its map, and every relative link and image points at something that exists."""

from __future__ import annotations

import re
from pathlib import Path

from tests.docs.blocks import PAGES, ROOT

LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")


def slug(heading: str) -> str:
    """The anchor GitHub gives a heading."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    found: set[str] = set()
    fenced = False
    for line in page.read_text().splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and line.startswith("#"):
            found.add(slug(line.lstrip("#")))
    return found


def test_readme_starts_with_the_two_commands_and_stays_short() -> None:
    lines = (ROOT / "README.md").read_text().splitlines()
    assert lines[:3] == ["# rosettaserve", "", "```"]
    assert lines[3].startswith("make serve ")
    assert lines[4].startswith("make test ")
    assert len(lines) <= 250


def test_every_page_of_docs_is_on_the_readme_map() -> None:
    readme = (ROOT / "README.md").read_text()
    for page in sorted((ROOT / "docs").glob("*.md")):
        assert f"(docs/{page.name})" in readme, page.name


def test_every_relative_link_and_image_exists() -> None:
    checked = 0
    for page in PAGES:
        for target in LINK.findall(page.read_text()):
            if re.match(r"[a-z]+:", target):
                continue
            path, _, anchor = target.partition("#")
            where = (page.parent / path).resolve() if path else page
            assert where.exists(), f"{page.name}: {target}"
            if anchor and where.suffix == ".md":
                assert anchor in anchors(where), f"{page.name}: {target}"
            checked += 1
    assert checked > 50
