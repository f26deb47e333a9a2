"""The multi-host tests' fixture: a factory of network namespaces (``netns.Network``) for one
module, every one removed afterwards."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from tests.multihost.netns import Network


@pytest.fixture(scope="module")
def network() -> Iterator[Callable[[str], Network]]:
    """A factory of networks for one module: every namespace made is removed afterwards,
    whatever happened (its processes killed first)."""
    made: list[Network] = []

    def make(tag: str) -> Network:
        net = Network(tag)
        made.append(net)
        net.open()
        return net

    yield make
    for net in made:
        net.destroy()
