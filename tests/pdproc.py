"""Real prefill, decode and scheduler processes on loopback for the PD integration tests.

Instances start as ``tests/serverproc.start_server`` starts any server (with ``--role``); the
scheduler prints only its ``http:`` line, and is ready once a prefill and a decode instance are.
"""

from __future__ import annotations

import os
import queue
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from tests.conftest import EXAMPLES
from tests.serverproc import START_TIMEOUT_S, ServerProcess, start_server, wait_until_ready


def llm_repo(dest: Path, **parameters: Any) -> Path:
    """A repository holding only the tiny example Llama, with these model.yaml parameters."""
    shutil.copytree(EXAMPLES / "tiny_llama", dest / "tiny_llama")
    params = {"threads": 1, **parameters}
    text = ", ".join(f"{k}: {v}" for k, v in params.items())
    (dest / "tiny_llama" / "model.yaml").write_text(f"runtime: llm\nparameters: {{{text}}}\n")
    return dest


def start_instance(repo: Path, role: str, *args: str) -> ServerProcess:
    return start_server(repo, "--role", role, *args)


def start_scheduler(
    prefill: list[ServerProcess], decode: list[ServerProcess], *args: str, wait_ready: bool = True
) -> ServerProcess:
    cmd = [sys.executable, "-m", "rosettaserve", "scheduler", "--http-port", "0"]
    cmd += ["--prefill", *(p.http_url for p in prefill), "--decode", *(d.http_url for d in decode)]
    proc = subprocess.Popen(
        [*cmd, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=dict(os.environ, PYTHONUNBUFFERED="1"),
    )
    lines: list[str] = []
    found: queue.Queue[str] = queue.Queue()

    def pump() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line.rstrip("\n"))
            if line.startswith("http: "):
                found.put(line.split(" ", 1)[1].strip())

    threading.Thread(target=pump, daemon=True).start()
    try:
        url = found.get(timeout=START_TIMEOUT_S)
    except queue.Empty:
        proc.kill()
        raise RuntimeError(
            "the scheduler did not print its address:\n" + "\n".join(lines)
        ) from None
    server = ServerProcess(proc, url, lines)
    if wait_ready:
        wait_until_ready(server)
    return server


def instances(scheduler: ServerProcess) -> dict[str, Any]:
    return dict(httpx.get(scheduler.http_url + "/v1/pd/instances", timeout=10).json())


def status(instance: ServerProcess) -> dict[str, Any]:
    return dict(httpx.get(instance.http_url + "/v1/status", timeout=10).json())


def eventually(condition: Callable[[], bool], timeout: float = 30.0) -> None:
    """Wait for a condition the system reaches by itself (a guard against hanging, not a
    measurement: the tests never assert how long anything took)."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "the condition was never reached"
        time.sleep(0.05)
