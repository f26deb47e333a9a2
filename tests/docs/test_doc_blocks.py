"""Every code block of README.md and docs/*.md marked to run (tests/docs/blocks.py) runs
against a real server started as the docs say, and prints what its `output` block shows."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.docs.blocks import Block, all_blocks, matches, runnable
from tests.docs.groups import DEFAULT_COMMAND, Group

BLOCKS = runnable()


def server_block(group: str) -> str:
    found = [b.text for b in all_blocks() if b.server_group == group]
    assert len(found) <= 1, f"group {group} has {len(found)} server blocks"
    return found[0] if found else DEFAULT_COMMAND


class Groups:
    """Each group's servers, started when its first block runs, stopped at the end."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.started: dict[str, Group] = {}

    def get(self, name: str) -> Group:
        if name not in self.started:
            folder = self.root / name
            folder.mkdir()
            group = Group(name, folder)
            self.started[name] = group
            for block in all_blocks():
                if block.group == name and block.setup:
                    done = group.run(block)
                    assert done.returncode == 0, f"{block.where}:\n{done.stdout}{done.stderr}"
            group.start(server_block(name))
        return self.started[name]


@pytest.fixture(scope="session")
def groups(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Groups]:
    found = Groups(tmp_path_factory.mktemp("docs"))
    yield found
    for group in found.started.values():
        group.stop()


def test_the_docs_have_blocks_that_run() -> None:
    pages = {b.page.name for b in BLOCKS}
    assert {"README.md", "oip.md", "llm.md", "grps.md", "tfserving.md", "pd.md"} <= pages
    assert len(BLOCKS) >= 20


@pytest.mark.parametrize("block", BLOCKS, ids=[b.where for b in BLOCKS])
def test_block_runs(block: Block, groups: Groups) -> None:
    assert block.group is not None
    group = groups.get(block.group)
    done = group.run(block)
    shown = f"{block.where} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
    assert done.returncode == 0, shown
    if block.output is not None:
        assert matches(block.output, done.stdout), shown + "\nexpected:\n" + block.output
