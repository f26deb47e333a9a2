"""Start a real rosettaserve process on loopback with ephemeral ports, for integration tests."""

from __future__ import annotations

import os
import queue
import signal
import ssl
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

# A hang guard, not a measure: a start takes seconds alone, but on a loaded machine (CI beside
# other jobs, the suite's own servers) loading a repository with an LLM took over 60 s.
START_TIMEOUT_S = 300.0


@dataclass
class ServerProcess:
    proc: subprocess.Popen[str]
    http_url: str  # http://127.0.0.1:PORT
    lines: list[str] = field(default_factory=list)
    grpc_address: str = ""  # 127.0.0.1:PORT

    @property
    def http_hostport(self) -> str:
        return self.http_url.removeprefix("http://").removeprefix("https://")

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()


def served(proc: ServerProcess) -> Iterator[ServerProcess]:
    """A fixture's body, ``yield from served(start_server(repo))``: the server, stopped cleanly
    once the tests that use it are done."""
    yield proc
    stop_cleanly(proc)


def stop_cleanly(proc: ServerProcess) -> None:
    """Stop ``proc``: it must exit with status 0 (else its output is the failure message)."""
    assert proc.stop() == 0, "\n".join(proc.lines)


def start_server(
    repo: Path, *args: str, wait_ready: bool = True, context: ssl.SSLContext | None = None
) -> ServerProcess:
    """``context``: how to reach a server started with TLS (--tls-cert) while waiting for it."""
    cmd = [sys.executable, "-m", "rosettaserve", "serve", str(repo), "--http-port", "0"]
    proc, lines, addresses = launch([*cmd, "--grpc-port", "0", *args], ("http", "grpc"))
    server = ServerProcess(proc, addresses["http"], lines, addresses["grpc"])
    if wait_ready:
        wait_until_ready(server, context)
    return server


def launch(
    cmd: list[str], kinds: tuple[str, ...], env: dict[str, str] | None = None
) -> tuple[subprocess.Popen[str], list[str], dict[str, str]]:
    """Run ``cmd`` (unbuffered, stderr into stdout, ``env`` over this process's environment),
    keep every line it prints, and wait until it printed a ``<kind>: <address>`` line for each
    of ``kinds``; returns those addresses."""
    env = dict(os.environ, PYTHONUNBUFFERED="1", **(env or {}))
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env
    )
    lines: list[str] = []
    found: queue.Queue[str] = queue.Queue()
    prefixes = tuple(f"{kind}: " for kind in kinds)

    def pump() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line.rstrip("\n"))
            if line.startswith(prefixes):
                found.put(line.strip())

    threading.Thread(target=pump, daemon=True).start()
    addresses: dict[str, str] = {}
    deadline = time.monotonic() + START_TIMEOUT_S
    try:
        while len(addresses) < len(kinds):
            try:
                kind, address = found.get(timeout=1).split(": ", 1)
            except queue.Empty:  # (exited: it never will print them)
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise
                continue
            addresses[kind] = address
    except queue.Empty:
        proc.kill()
        raise RuntimeError(
            f"{' '.join(cmd[1:4])} did not print its addresses:\n" + "\n".join(lines)
        ) from None
    return proc, lines, addresses


def wait_for(check: Callable[[], object], timeout: float = 30.0) -> None:
    """Poll ``check`` (a server's lines, an endpoint's answer) until it holds: an AssertionError
    past ``timeout`` seconds, an upper bound against a hang."""
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"condition not reached in {timeout} s"
        time.sleep(0.05)


def inflight(server: ServerProcess, model: str, version: str = "1") -> int:
    """How many requests a version of ``model`` has in hand (its /metrics gauge): a request a
    client has sent may still be on its way to the model."""
    url = server.http_url + "/metrics"
    with urllib.request.urlopen(url, timeout=30) as reply:
        text = reply.read().decode()
    prefix = f'rosettaserve_inflight_requests{{model="{model}",version="{version}"}} '
    line = next((ln for ln in text.splitlines() if ln.startswith(prefix)), prefix + "0")
    return int(float(line.rsplit(" ", 1)[1]))


def wait_until_ready(server: ServerProcess, context: ssl.SSLContext | None = None) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    url = server.http_url + "/v2/health/ready"
    while time.monotonic() < deadline and server.proc.poll() is None:  # (exited: it never will)
        try:
            with urllib.request.urlopen(url, timeout=2, context=context) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.05)
    server.proc.kill()  # the test fails; no server of its is left running after it
    server.proc.wait()
    raise RuntimeError("server never became ready:\n" + "\n".join(server.lines))
