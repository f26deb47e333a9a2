"""The HTTP/2 tables' client fixture: each module starts its own ``server``; ``c`` is a fresh
raw connection to it per test, and the server must still serve a new one afterwards."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.rfc.h2_support import RawH2, serves_new
from tests.serverproc import ServerProcess


@pytest.fixture
def c(server: ServerProcess) -> Iterator[RawH2]:
    with RawH2(server.grpc_address) as client:
        yield client
    serves_new(server)
