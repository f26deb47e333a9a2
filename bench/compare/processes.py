"""The server processes: start one pinned to a core on free ports (``Server``), wait until it is
ready, ask its version, read RSS and CPU time summed over its process tree from /proc, wait
until it is idle between runs (``settle``), and stop it (SIGTERM, then SIGKILL to the tree).
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import re
import signal
import socket
import ssl
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from spec import ServerSpec

HOST = "127.0.0.1"
READY_TIMEOUT = 180.0
STOP_TIMEOUT = 10.0
SETTLE_WINDOW, SETTLE_BUSY, SETTLE_TIMEOUT = 0.25, 0.1, 60.0


def process_tree(root: int) -> list[int]:
    """``root`` and all its descendants, from /proc."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry.name))
    tree, todo = [], [root]
    while todo:
        pid = todo.pop()
        tree.append(pid)
        todo += children.get(pid, [])
    return tree


def status_kb(pid: int, field_name: str) -> int:
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return 0
    match = re.search(rf"^{field_name}:\s+(\d+) kB", text, re.M)
    return int(match.group(1)) if match else 0


def tree_memory(root: int, field_name: str) -> float:
    """VmRSS or VmHWM summed over the process tree, in bytes."""
    return float(sum(status_kb(pid, field_name) for pid in process_tree(root)) * 1024)


def tree_cpu(root: int) -> float:
    """CPU seconds (user + system) used so far by the live processes of the tree."""
    ticks = 0
    for pid in process_tree(root):
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        ticks += int(fields[11]) + int(fields[12])  # utime, stime
    return ticks / os.sysconf("SC_CLK_TCK")


def settle(server: Server) -> float:
    """Wait until the server is idle (its tree under SETTLE_BUSY of a core over SETTLE_WINDOW).

    A load generator stops with requests in flight; a server that does not cancel them keeps
    working on them. Without this the next run would start behind that backlog.
    """
    began = time.monotonic()
    before = tree_cpu(server.proc.pid)
    while time.monotonic() - began < SETTLE_TIMEOUT:
        time.sleep(SETTLE_WINDOW)
        now = tree_cpu(server.proc.pid)
        if now - before < SETTLE_BUSY * SETTLE_WINDOW:
            break
        before = now
    return time.monotonic() - began


def free_ports(n: int) -> list[int]:
    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind((HOST, 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


@dataclass
class Server:
    spec: ServerSpec
    proc: subprocess.Popen[bytes]
    http_port: int
    grpc_port: int
    log: Path
    started: float

    @property
    def scheme(self) -> str:
        return "https" if self.spec.tls else "http"

    def rest_url(self, path: str) -> str:
        return f"{self.scheme}://{HOST}:{self.http_port}{path}"

    def http_connection(self, timeout: float) -> http.client.HTTPConnection:
        """To the HTTP port; over TLS without verification (the ready and version checks)."""
        if not self.spec.tls:
            return http.client.HTTPConnection(HOST, self.http_port, timeout=timeout)
        context = ssl._create_unverified_context()
        return http.client.HTTPSConnection(HOST, self.http_port, timeout=timeout, context=context)

    def log_tail(self, lines: int = 15) -> str:
        try:
            text = self.log.read_text(errors="replace").splitlines()
        except OSError:
            return ""
        return "\n".join(text[-lines:])


def substitute(value: str, http_port: int, grpc_port: int) -> str:
    # not str.format: env values may be JSON, braces and all
    return value.replace("{http_port}", str(http_port)).replace("{grpc_port}", str(grpc_port))


def start(spec: ServerSpec, cpu: int, log: Path) -> Server:
    http_port, grpc_port = free_ports(2)
    argv = [substitute(a, http_port, grpc_port) for a in spec.argv]
    env = dict(os.environ)
    env.update({k: substitute(v, http_port, grpc_port) for k, v in spec.env.items()})
    with log.open("wb") as out:
        started = time.monotonic()
        proc = subprocess.Popen(
            ["taskset", "-c", str(cpu), *argv],
            env=env,
            cwd=spec.cwd,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    return Server(spec, proc, http_port, grpc_port, log, started)


def is_ready(server: Server) -> bool:
    if server.spec.ready_path is None:
        with contextlib.suppress(OSError), socket.create_connection((HOST, server.grpc_port), 1):
            return True
        return False
    conn = server.http_connection(timeout=2)
    try:
        conn.request("GET", server.spec.ready_path)
        return conn.getresponse().status == 200
    except (OSError, http.client.HTTPException):
        return False
    finally:
        conn.close()


def wait_ready(server: Server) -> float:
    """Seconds from spawn to ready."""
    while time.monotonic() - server.started < READY_TIMEOUT:
        if server.proc.poll() is not None:
            raise RuntimeError(
                f"{server.spec.key} exited with {server.proc.returncode} before it was ready:\n"
                + server.log_tail()
            )
        if is_ready(server):
            return time.monotonic() - server.started
        time.sleep(0.01)
    raise RuntimeError(
        f"{server.spec.key} not ready after {READY_TIMEOUT:.0f} s\n{server.log_tail()}"
    )


def stop(server: Server) -> None:
    """SIGTERM; after STOP_TIMEOUT the whole tree (by pid) and the session get SIGKILL."""
    tree = process_tree(server.proc.pid)
    if server.proc.poll() is None:
        server.proc.send_signal(signal.SIGTERM)
        try:
            server.proc.wait(STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            print(f"  {server.spec.key}: no exit {STOP_TIMEOUT:.0f} s after SIGTERM, killing")
    for pid in tree:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    with contextlib.suppress(OSError):
        os.killpg(server.proc.pid, signal.SIGKILL)  # the session this driver started for it
    with contextlib.suppress(subprocess.TimeoutExpired):
        server.proc.wait(5)


def server_version(server: Server) -> str:
    """name and version from OIP server metadata (GET /v2), where the server answers it."""
    if server.spec.ready_path is None:
        return ""
    conn = server.http_connection(timeout=5)
    try:
        conn.request("GET", "/v2")
        resp = conn.getresponse()
        doc = json.loads(resp.read()) if resp.status == 200 else {}
        return f"{doc.get('name', '?')} {doc.get('version', '?')}" if doc else ""
    except (OSError, ValueError, http.client.HTTPException):
        return ""
    finally:
        conn.close()
