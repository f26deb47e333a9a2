"""A port another process already listens on stops the start with one line naming the address
and the option that chose it, and a non-zero exit (no traceback), for every port, with one
process or with workers."""

from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import EXAMPLES
from tests.serverproc import START_TIMEOUT_S


@pytest.fixture
def taken() -> Iterator[int]:
    """A port something else listens on."""
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        yield holder.getsockname()[1]


def start(repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "rosettaserve", "serve", str(repo), *args]
    return subprocess.run(cmd, check=False, capture_output=True, text=True, timeout=START_TIMEOUT_S)


@pytest.mark.parametrize(
    ("option", "workers"),
    [
        ("--http-port", "1"),
        ("--grpc-port", "1"),
        ("--metrics-port", "1"),
        ("--http-port", "2"),
        ("--metrics-port", "2"),
    ],
)
def test_a_taken_port_is_named_with_its_option(option: str, workers: str, taken: int) -> None:
    ports = {"--http-port": "0", "--grpc-port": "0", option: str(taken)}
    args = [arg for pair in ports.items() for arg in pair]
    done = start(EXAMPLES.parent / "models", *args, "--workers", workers)
    assert done.returncode == 1, done.stdout + done.stderr
    errors = done.stderr.strip().splitlines()
    assert errors == [
        f"rosettaserve: cannot start: 127.0.0.1:{taken} ({option}) is already in use by another "
        f"process; stop it or choose another port with {option}"
    ], done.stderr
    assert "Traceback" not in done.stdout + done.stderr
