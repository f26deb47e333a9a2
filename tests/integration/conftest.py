"""Fixtures for the grps integration tests (tests/integration/grps_support.py): each module that
asks for them gets a server of its own on the grps test repository."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import grpc
import pytest

from tests.integration.grps_support import generate_stubs, start_grps_server
from tests.serverproc import ServerProcess, served


@pytest.fixture(scope="module")
def grps_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    yield from served(start_grps_server(tmp_path_factory.mktemp("grps_repo")))


@pytest.fixture(scope="module")
def grps_stubs(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """grps_pb2_grpc as grpcio-tools generates it from our proto."""
    return generate_stubs(tmp_path_factory.mktemp("grps_stubs"))


@pytest.fixture(scope="module")
def stub(grps_server: ServerProcess, grps_stubs: Any) -> Iterator[Any]:
    """A GrpsServiceStub on ``grps_server``."""
    with grpc.insecure_channel(grps_server.grpc_address) as channel:
        yield grps_stubs.GrpsServiceStub(channel)
