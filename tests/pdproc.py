"""Real prefill, decode and scheduler processes on loopback for the PD integration tests.

Instances start as ``tests/serverproc.start_server`` starts any server (with ``--role``), their
peers being every port of 127.0.0.1 (``--peer-allow 127.0.0.1``: their ports are only known
once they run) unless the test names them; the scheduler prints only its ``http:`` line, and is
ready once a prefill and a decode instance are.
"""

from __future__ import annotations

import shutil
import ssl
import sys
from pathlib import Path
from typing import Any

import httpx

from tests.conftest import EXAMPLES
from tests.serverproc import ServerProcess, launch, start_server, wait_for, wait_until_ready


def llm_repo(dest: Path, **parameters: Any) -> Path:
    """A repository holding only the tiny example Llama, with these model.yaml parameters."""
    shutil.copytree(EXAMPLES / "tiny_llama", dest / "tiny_llama")
    params = {"threads": 1, **parameters}
    text = ", ".join(f"{k}: {v}" for k, v in params.items())
    (dest / "tiny_llama" / "model.yaml").write_text(f"runtime: llm\nparameters: {{{text}}}\n")
    return dest


LOOPBACK_PEERS = ("--peer-allow", "127.0.0.1")


def start_instance(repo: Path, role: str, *args: str, **kwargs: Any) -> ServerProcess:
    peers = () if "--peer-allow" in args else LOOPBACK_PEERS
    return start_server(repo, "--role", role, *peers, *args, **kwargs)


def start_scheduler(
    prefill: list[ServerProcess],
    decode: list[ServerProcess],
    *args: str,
    wait_ready: bool = True,
    context: ssl.SSLContext | None = None,
) -> ServerProcess:
    """``context``: how to reach a scheduler started with TLS while waiting for it."""
    cmd = [sys.executable, "-m", "rosettaserve", "scheduler", "--http-port", "0"]
    cmd += ["--prefill", *(p.http_url for p in prefill), "--decode", *(d.http_url for d in decode)]
    proc, lines, addresses = launch([*cmd, *args], ("http",))
    server = ServerProcess(proc, addresses["http"], lines)
    if wait_ready:
        wait_until_ready(server, context)
    return server


def instances(scheduler: ServerProcess) -> dict[str, Any]:
    return dict(httpx.get(scheduler.http_url + "/v1/pd/instances", timeout=10).json())


def status(instance: ServerProcess) -> dict[str, Any]:
    return dict(httpx.get(instance.http_url + "/v1/status", timeout=10).json())


eventually = wait_for  # the one poll of the tests: a condition the system reaches by itself
