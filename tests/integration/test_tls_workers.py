"""--workers 2 with TLS and an API key: every worker serves TLS with the same certificate and
asks for the key; the supervisor's metrics port speaks TLS too; SIGHUP to the supervisor makes
every worker load the rotated certificate."""

from __future__ import annotations

import shutil
import signal
from collections.abc import Iterator

import httpx
import pytest

from tests.conftest import EXAMPLES
from tests.integration.tls_support import Pki, make_pki, peer_subject, start_tls_server
from tests.pdproc import eventually
from tests.serverproc import ServerProcess, served

KEY = "workers-key-0c"
CONNECTIONS = 12  # new connections, spread over both workers by the kernel


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, pki: Pki) -> Iterator[ServerProcess]:
    repo = tmp_path_factory.mktemp("workers_repo")
    shutil.copytree(EXAMPLES / "half_plus_two", repo / "half_plus_two")
    args = ("--workers", "2", "--api-key", KEY, "--metrics-port", "0")
    yield from served(start_tls_server(repo, pki, *args))


def test_every_worker_serves_tls_and_asks_for_the_key(server: ServerProcess, pki: Pki) -> None:
    assert server.http_url.startswith("https://")
    assert server.grpc_address.endswith(" (tls)")
    url = server.http_url + "/v2/models/half_plus_two"
    for _ in range(CONNECTIONS):  # a client each: a new connection each
        with httpx.Client(verify=pki.context(), timeout=30) as client:
            assert client.get(url).status_code == 401
            assert client.get(url, headers={"x-api-key": KEY}).status_code == 200


def test_the_supervisors_metrics_port_speaks_tls_without_a_key(
    server: ServerProcess, pki: Pki
) -> None:
    line = next(line for line in server.lines if line.startswith("metrics: "))
    assert line.startswith("metrics: https://")
    with httpx.Client(verify=pki.context(), timeout=30) as client:
        assert client.get(line.removeprefix("metrics: ")).status_code == 200


def test_sighup_to_the_supervisor_reaches_every_worker(server: ServerProcess, pki: Pki) -> None:
    port = int(server.http_hostport.rsplit(":", 1)[1])
    pki.reissue_server("server-rotated")
    server.proc.send_signal(signal.SIGHUP)

    def all_rotated() -> bool:
        names = {peer_subject("127.0.0.1", port, pki) for _ in range(CONNECTIONS)}
        return names == {"server-rotated"}

    eventually(all_rotated)
    assert server.proc.poll() is None
