"""Listening sockets: one process's own, or one of several workers' sharing a port."""

from __future__ import annotations

import asyncio
import errno
import socket
import ssl
from collections.abc import Callable, Iterable
from typing import Any

from rosettaserve.transport.idle import Idling, sweep

HANDSHAKE_TIMEOUT_S = 10.0  # a TLS client that connects and never finishes its handshake


class CannotListen(OSError):
    """A port that cannot be had, said in one line naming it and the option that chose it."""


def cannot_listen(exc: OSError, host: str, port: int, option: str) -> OSError:
    where = f"{url_host(host)}:{port}" + (f" ({option})" if option else "")
    if exc.errno == errno.EADDRINUSE:
        hint = f"; stop it or choose another port with {option}" if option else ""
        return CannotListen(f"{where} is already in use by another process{hint}")
    if exc.errno == errno.EACCES:
        return CannotListen(f"{where}: permission denied (ports below 1024 need privileges)")
    return CannotListen(f"cannot listen on {where}: {exc.strerror or exc}")


def _bind(sock: socket.socket, host: str, port: int, option: str) -> None:
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise cannot_listen(exc, host, port, option) from None


def bind(host: str, port: int, reuse_port: bool = False, option: str = "") -> socket.socket:
    """A listening socket; ``reuse_port``: one of several processes' on the same port.
    ``option``: the command-line option that chose the port, named if it cannot be had."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if reuse_port:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    _bind(sock, host, port, option)
    sock.listen(2048)
    sock.setblocking(False)
    return sock


def reserve(host: str, port: int, option: str = "") -> socket.socket:
    """Hold ``port`` for worker processes: bound with SO_REUSEPORT but never listening, so it
    takes no connections itself. A port someone already listens on is refused, even one shared
    with SO_REUSEPORT."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    if port:
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            _bind(probe, host, port, option)
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    _bind(sock, host, port, option)
    return sock


def url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def no_delay(transport: Any) -> None:
    """Answers leave at once (the server writes each round's answers in one write already)."""
    sock = transport.get_extra_info("socket")
    if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


async def listen(
    sock: socket.socket,
    protocol: Callable[[], asyncio.BaseProtocol],
    connections: Iterable[Idling],
    idle_timeout: float,
    tls: ssl.SSLContext | None = None,
) -> tuple[asyncio.Server, asyncio.Task[None]]:
    """Serve ``sock`` with a ``protocol()`` for each client, and the sweep that closes those of
    ``connections`` left idle for ``idle_timeout``. ``tls``: every connection is TLS (a client
    that does not finish its handshake in time, or speaks clear text, is closed)."""
    loop = asyncio.get_running_loop()
    if tls is None:
        server = await loop.create_server(protocol, sock=sock, backlog=2048)
    else:
        server = await loop.create_server(
            protocol, sock=sock, backlog=2048, ssl=tls, ssl_handshake_timeout=HANDSHAKE_TIMEOUT_S
        )
    return server, loop.create_task(sweep(connections, idle_timeout))
