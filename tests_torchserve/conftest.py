"""``runtime: torchserve`` tests run in their own pytest process, from .venv-torchserve
(``make test``: ``.venv-torchserve/bin/python -m pytest -q tests_torchserve``).

The same archives (build_archives.py, made with TorchServe's ``torch-model-archiver``) are
served two ways, each started once for the whole run: by the real TorchServe (its Java frontend
from the ``torchserve`` package, Debian's JRE) and by rosettaserve with ``runtime: torchserve``.
The ``server`` fixture is each of them in turn, so every test asserts the same answers of both.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests.serverproc import ServerProcess, served, start_server
from tests_torchserve.build_archives import build_repository, build_store

START_TIMEOUT_S = 300.0  # TorchServe's JVM and one Python worker per model, on a busy machine
MODELS = ("linear", "default_base", "echo", "stream", "batch")


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="session")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    work = tmp_path_factory.mktemp("archives")
    return build_store(work / "store", work)


def ts_config(store: Path, inference: int, management: int, workers: int) -> str:
    """config.properties for a quick, quiet start: no token, no metrics, ``workers`` workers a
    model, every port a free one (its gRPC ports too: 7070 and 7071 may be taken)."""
    return f"""\
inference_address=http://127.0.0.1:{inference}
management_address=http://127.0.0.1:{management}
metrics_address=http://127.0.0.1:{free_port()}
grpc_inference_port={free_port()}
grpc_management_port={free_port()}
disable_token_authorization=true
enable_model_api=true
default_workers_per_model={workers}
model_store={store}
load_models={",".join(f"{m}.mar" for m in MODELS)}
enable_metrics_api=false
disable_system_metrics=true
install_py_dep_per_model=false
"""


@contextlib.contextmanager
def run_torchserve(store: Path, work: Path, workers: int = 1) -> Iterator[tuple[str, str]]:
    """The real TorchServe serving ``store``'s archives (but those of UNLOADED): its inference
    and management URLs, once every model has a ready worker; stopped (with its workers) on
    exit."""
    inference, management = free_port(), free_port()
    config = work / "config.properties"
    config.write_text(ts_config(store, inference, management, workers))
    log = work / "torchserve.log"
    torchserve = str(Path(sys.executable).parent / "torchserve")
    cmd = [torchserve, "--start", "--foreground", "--ncs", "--disable-token-auth",
           "--ts-config", str(config), "--model-store", str(store)]  # fmt: skip
    # TMPDIR: its pid file (.model_server.pid, "already running" while it lasts) is its own
    env = dict(os.environ, LOG_LOCATION=str(work), METRICS_LOCATION=str(work), TMPDIR=str(work))
    with log.open("w") as out:
        proc = subprocess.Popen(
            cmd, stdout=out, stderr=subprocess.STDOUT, cwd=work, env=env, start_new_session=True
        )
    try:
        wait_models(proc, f"http://127.0.0.1:{management}", log)
        yield f"http://127.0.0.1:{inference}", f"http://127.0.0.1:{management}"
    finally:
        stop_group(proc)


@pytest.fixture(scope="session")
def torchserve_urls(
    store: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, str]]:
    with run_torchserve(store, tmp_path_factory.mktemp("torchserve")) as urls:
        yield urls


def stop_group(proc: subprocess.Popen[bytes]) -> None:
    """TorchServe's frontend and its Python workers, all of them."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
            proc.wait(timeout=60)
            return
        except ProcessLookupError:
            return
        except subprocess.TimeoutExpired:
            continue
    proc.wait()


def wait_models(proc: subprocess.Popen[bytes], management: str, log: Path) -> None:
    """Until every model has a READY worker (TorchServe's /ping is healthy before that)."""
    deadline = time.monotonic() + START_TIMEOUT_S
    waiting = set(MODELS)
    while waiting and time.monotonic() < deadline and proc.poll() is None:
        name = next(iter(waiting))
        try:
            with urllib.request.urlopen(f"{management}/models/{name}", timeout=5) as r:
                if b'"status": "READY"' in r.read():
                    waiting.discard(name)
                    continue
        except OSError:
            pass
        time.sleep(0.5)
    if waiting:
        raise RuntimeError(f"TorchServe did not start {waiting}:\n{log.read_text()[-3000:]}")


@pytest.fixture(scope="session")
def rosetta(store: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    repo = build_repository(store, tmp_path_factory.mktemp("repo"))
    yield from served(start_server(repo, "--enable-model-control"))


@dataclass
class Peer:
    """One server's clients: its inference API and its management API."""

    name: str
    inference: httpx.Client
    management: httpx.Client


@pytest.fixture(scope="session", params=["torchserve", "rosettaserve"])
def peer(request: pytest.FixtureRequest) -> Iterator[Peer]:
    """One server or the other: every test that takes it runs against both."""
    if request.param == "torchserve":
        inference, management = request.getfixturevalue("torchserve_urls")
    else:  # both APIs on the HTTP port
        inference = management = request.getfixturevalue("rosetta").http_url
    with (
        httpx.Client(base_url=inference, timeout=120) as client,
        httpx.Client(base_url=management, timeout=120) as control,
    ):
        yield Peer(request.param, client, control)


@pytest.fixture(scope="session")
def server(peer: Peer) -> httpx.Client:
    """The inference API of one server or the other."""
    return peer.inference
