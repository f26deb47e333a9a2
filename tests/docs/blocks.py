"""The code blocks of README.md and docs/*.md that are meant to run, read from the Markdown.

A fenced block runs when its info string says so, after the language:

    ```sh run                 a shell block, run with `bash -e` against the examples server
    ```python run             a Python block, run with the venv's python against it
    ```sh run=GROUP           against the server(s) of GROUP instead (tests/docs/groups.py)
    ```sh run=GROUP setup     run in GROUP's folder before its server starts (make certificates)
    ```sh server=GROUP        the command lines that start GROUP's server(s): the test starts
                              them itself (free ports, the examples copied), as written otherwise
    ```text output            right after a run block: what it prints (`…` stands for any text)

Blocks speak of 127.0.0.1:8000 and :8001 as a user would; the test rewrites the ports.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^(```+)\s*(\S*)\s*(.*)$")
DEFAULT_GROUP = "examples"


@dataclass
class Block:
    page: Path
    line: int  # 1-based line of the opening fence
    lang: str
    words: list[str]
    text: str
    output: str | None = None  # the `output` block that follows, if any

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"

    def option(self, name: str) -> str | None:
        """``run`` -> the default group, ``run=pd`` -> "pd", absent -> None."""
        for word in self.words:
            key, _, value = word.partition("=")
            if key == name:
                return value or DEFAULT_GROUP
        return None

    @property
    def group(self) -> str | None:
        return self.option("run")

    @property
    def server_group(self) -> str | None:
        return self.option("server")

    @property
    def setup(self) -> bool:
        return "setup" in self.words


def read_blocks(page: Path) -> list[Block]:
    blocks: list[Block] = []
    lines = page.read_text().splitlines()
    i = 0
    while i < len(lines):
        opening = FENCE.match(lines[i])
        if opening is None:
            i += 1
            continue
        fence, lang, rest = opening.groups()
        body: list[str] = []
        j = i + 1
        while j < len(lines) and not lines[j].startswith(fence):
            body.append(lines[j])
            j += 1
        block = Block(page, i + 1, lang, rest.split(), "\n".join(body) + "\n")
        if "output" in block.words and blocks and blocks[-1].group is not None:
            blocks[-1].output = block.text
        else:
            blocks.append(block)
        i = j + 1
    return blocks


def all_blocks() -> list[Block]:
    return [b for page in PAGES for b in read_blocks(page)]


def runnable() -> list[Block]:
    return [b for b in all_blocks() if b.group is not None and not b.setup]


def matches(expected: str, printed: str) -> bool:
    """``printed`` is ``expected`` with each `…` standing for any text. Line breaks and the
    blanks around them do not count: an HTTP body seldom ends with one, a page shows each
    answer on a line of its own."""
    want = re.sub(r"\s*\n\s*", "", expected.strip())
    got = re.sub(r"\s*\n\s*", "", printed.strip())
    pattern = ".*?".join(re.escape(part) for part in want.split("…"))
    return re.fullmatch(pattern, got, re.DOTALL) is not None
