"""The whole server in this process, its connections fed by hand: what bench/instructions.py
measures under callgrind.

``serve`` starts ``Server(Settings(...)).run()`` as the command line does, on an event loop
whose ``create_server`` notes the protocol factory of each port it listens on. Connections made
from those factories are the ones the server would make for a client; they are fed bytes as the
loop feeds a socket's (``get_buffer``/``buffer_updated``, else ``data_received``) and write to a
``Wire`` that only counts and keeps what it is given. The script needs nothing but the classes
``Server`` and ``Settings``, the settings a user passes on the command line and the bytes on the
wire, so it runs unchanged on trees whose modules are laid out differently.
"""

from __future__ import annotations

import asyncio
import importlib
import pkgutil
import socket
import sys
from collections.abc import Callable
from typing import Any

import uvloop

Factory = Callable[[], asyncio.BaseProtocol]
READY_WAIT_S = 1800.0  # loading the models under valgrind (torch, transformers) is slow


def find_class(name: str, modules: tuple[str, ...], package: str) -> Any:
    """``name`` from the first of ``modules`` that has it, else from any module of ``package``
    (the layout of the tree under test is not known in advance)."""
    for module in modules:
        try:
            found = getattr(importlib.import_module(module), name, None)
        except ImportError:
            continue
        if found is not None:
            return found
    root = importlib.import_module(package)
    for info in pkgutil.walk_packages(getattr(root, "__path__", []), f"{package}."):
        if info.name.endswith(".__main__"):  # imported, it runs the command line (sys.argv)
            continue
        try:
            found = getattr(importlib.import_module(info.name), name, None)
        except ImportError:
            continue
        if isinstance(found, type) and found.__module__ == info.name:
            return found
    sys.exit(f"no class {name} in {', '.join(modules)} nor in package {package}")


def server_classes() -> tuple[Any, Any]:
    server = find_class(
        "Server", ("rosettaserve.server", "rosettaserve.server.server"), "rosettaserve.server"
    )
    settings = find_class(
        "Settings", ("rosettaserve.settings", "rosettaserve.server.settings"), "rosettaserve"
    )
    return server, settings


class Tally:
    """Writes of several connections together (one number to watch)."""

    def __init__(self) -> None:
        self.writes = 0


class Wire:
    """A connection's transport: counts the writes (in ``tally`` too) and keeps them, for the
    answers to be checked afterwards. ``waiter``: set once ``writes`` reaches ``until``."""

    def __init__(self, peer: int, tally: Tally | None = None) -> None:
        self.extra = {"peername": ("127.0.0.1", peer), "sockname": ("127.0.0.1", 8000)}
        self.tally = tally or Tally()
        self.writes = 0
        self.kept: list[Any] = []
        self.until = 0
        self.waiter: asyncio.Future[None] | None = None
        self.closed = False

    def write(self, data: Any) -> None:
        self.writes += 1
        self.tally.writes += 1
        self.kept.append(data)
        if self.waiter is not None and self.writes >= self.until:
            self._reached()

    def writelines(self, parts: Any) -> None:
        self.writes += 1
        self.tally.writes += 1
        self.kept.append(tuple(parts))  # joined when read: the server's list may be reused
        if self.waiter is not None and self.writes >= self.until:
            self._reached()

    def _reached(self) -> None:
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_result(None)
        self.waiter = None

    def take(self) -> bytes:
        """What was written since the last ``take``."""
        data = b"".join(joined(part) for part in self.kept)
        self.kept.clear()
        return data

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self.extra.get(name, default)

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True

    def abort(self) -> None:
        self.closed = True

    def get_write_buffer_size(self) -> int:
        return 0

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        pass

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def can_write_eof(self) -> bool:
        return False


def joined(write: Any) -> bytes:
    """One write's bytes (``writelines``'s parts joined)."""
    return b"".join(write) if isinstance(write, tuple) else bytes(write)


def feed(conn: Any, data: bytes) -> None:
    """Hand ``data`` to ``conn`` as the loop hands it a socket's bytes."""
    if not hasattr(conn, "get_buffer"):
        conn.data_received(data)
        return
    view = memoryview(data)
    while view:
        buffer = conn.get_buffer(len(view))
        n = min(len(buffer), len(view))
        buffer[:n] = view[:n]
        conn.buffer_updated(n)
        view = view[n:]


def connect(factory: Factory, peer: int, tally: Tally | None = None) -> tuple[Any, Wire]:
    conn = factory()
    wire = Wire(peer, tally)
    conn.connection_made(wire)  # type: ignore[arg-type]
    return conn, wire


class RecordingLoop(uvloop.Loop):  # type: ignore[misc]
    """uvloop's loop, noting which protocol factory serves which port."""

    factories: dict[int, Factory]

    async def create_server(self, protocol_factory: Factory, *args: Any, **kwargs: Any) -> Any:
        server = await super().create_server(protocol_factory, *args, **kwargs)
        for sock in server.sockets:  # a socket given, or bound here from a host and port
            self.factories[sock.getsockname()[1]] = protocol_factory
        return server


def new_loop() -> RecordingLoop:
    loop = RecordingLoop()
    loop.factories = {}
    return loop


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Served:
    """A started server: a connection factory for each port."""

    def __init__(self, server: Any, http: Factory, grpc: Factory) -> None:
        self.server, self.http, self.grpc = server, http, grpc
        self.peers = iter(range(40000, 60000))

    def http_connection(self, tally: Tally | None = None) -> tuple[Any, Wire]:
        return connect(self.http, next(self.peers), tally)

    def grpc_connection(self, tally: Tally | None = None) -> tuple[Any, Wire]:
        return connect(self.grpc, next(self.peers), tally)


async def serve(**settings: Any) -> Served:
    """The server of ``settings`` (those of ``Settings``: the command line's) started, its models
    loaded and ready; then its periodic work (idle sweeps, the stuck-call watchdog: tasks that
    wake every fraction of a second, a cost per second and not per request, which valgrind's
    slowdown would multiply) is cancelled."""
    server_class, settings_class = server_classes()
    loop: RecordingLoop = asyncio.get_running_loop()  # type: ignore[assignment]
    http_port, grpc_port = free_port(), free_port()
    settings = settings_class(http_port=http_port, grpc_port=grpc_port, **settings)
    server = server_class(settings)
    running = asyncio.ensure_future(server.run())
    ports = (http_port, grpc_port)
    for _ in range(int(READY_WAIT_S / 0.05)):
        if all(p in loop.factories for p in ports) and await _ready(loop.factories[http_port]):
            break
        if running.done():
            running.result()
            sys.exit("the server stopped while starting")
        await asyncio.sleep(0.05)
    else:
        sys.exit("the server did not become ready")
    ours = asyncio.current_task()
    for task in asyncio.all_tasks():
        if task is not ours and task is not running:
            task.cancel()
    await asyncio.sleep(0)
    return Served(server, loop.factories[http_port], loop.factories[grpc_port])


async def _ready(factory: Factory) -> bool:
    """GET /v2/health/ready answered 200 (every model loaded)."""
    conn, wire = connect(factory, 39999)
    feed(conn, b"GET /v2/health/ready HTTP/1.1\r\nHost: bench\r\n\r\n")
    for _ in range(1000):
        if wire.writes:
            break
        await asyncio.sleep(0)
    answer = wire.take()
    conn.connection_lost(None)
    return answer.startswith(b"HTTP/1.1 200")


def http_answers(data: bytes) -> tuple[list[tuple[int, bytes]], bytes]:
    """The (status, body) of each whole HTTP/1.1 answer in ``data`` (Content-Length or
    chunked), and the bytes after them (an answer not yet whole)."""
    found: list[tuple[int, bytes]] = []
    at = 0
    while True:
        end = data.find(b"\r\n\r\n", at)
        if end < 0:
            return found, data[at:]
        head = data[at:end].decode("latin-1").split("\r\n")
        fields = {k.strip().lower(): v.strip() for k, _, v in (h.partition(":") for h in head[1:])}
        start = end + 4
        if fields.get("transfer-encoding") == "chunked":
            body, after = _chunks(data, start)
        else:
            after = start + int(fields.get("content-length", "0"))
            body = data[start:after]
        if after < 0 or after > len(data):
            return found, data[at:]
        found.append((int(head[0].split()[1]), body))
        at = after


def _chunks(data: bytes, at: int) -> tuple[bytes, int]:
    parts = []
    while True:
        line = data.find(b"\r\n", at)
        if line < 0:
            return b"", -1
        size = int(data[at:line].split(b";")[0], 16)
        at = line + 2
        if at + size + 2 > len(data):
            return b"", -1
        parts.append(data[at : at + size])
        at += size + 2
        if size == 0:
            return b"".join(parts), at


def h2_frames(data: bytes) -> tuple[list[tuple[int, int, int, bytes]], bytes]:
    """(type, flags, stream id, payload) of each whole HTTP/2 frame in ``data``, and the bytes
    after them."""
    found = []
    at = 0
    while at + 9 <= len(data):
        length = int.from_bytes(data[at : at + 3], "big")
        if at + 9 + length > len(data):
            break
        kind, flags = data[at + 3], data[at + 4]
        stream = int.from_bytes(data[at + 5 : at + 9], "big") & 0x7FFFFFFF
        found.append((kind, flags, stream, data[at + 9 : at + 9 + length]))
        at += 9 + length
    return found, data[at:]
