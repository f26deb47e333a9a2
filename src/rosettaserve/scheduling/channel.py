"""The control channel between this server's own processes (the ``--workers`` supervisor and its
workers; a model and its ``isolation: process`` workers): a socketpair carrying pickled tuples.

A message is pickled with protocol 5 and its large buffers (numpy arrays' data) travel out of
band, each as it is: the arrays are neither copied into the pickle nor out of it.
"""

from __future__ import annotations

import asyncio
import ctypes
import os
import pickle
import signal
import socket
import struct
import sys
from typing import Any

_HEAD = struct.Struct("<II")  # bytes of the pickle, count of buffers sent out of band
_SIZE = struct.Struct("<Q")  # bytes of one such buffer
_PR_SET_PDEATHSIG = 1


def frames(*message: Any) -> list[bytes | memoryview]:
    """A message as the parts to write, one after the other: head, pickle, buffers."""
    buffers: list[pickle.PickleBuffer] = []
    data = pickle.dumps(message, protocol=5, buffer_callback=buffers.append)
    raws = [b.raw() for b in buffers]
    head = _HEAD.pack(len(data), len(raws)) + b"".join(_SIZE.pack(r.nbytes) for r in raws)
    return [head + data, *raws]


def child_process(module: str, *args: str) -> tuple[socket.socket, socket.socket, list[str]]:
    """This end and the child's end of a new channel, and the command that runs ``module`` as a
    child holding its end (pass it in ``pass_fds``; close it here once the child started)."""
    mine, theirs = socket.socketpair()
    return mine, theirs, [sys.executable, "-m", module, str(theirs.fileno()), *args]


def die_with(parent: int) -> None:
    """In a child: be killed when ``parent`` (the server) dies, even by SIGKILL (Linux), so
    that a stuck model never lingers."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):
        pass
    if os.getppid() != parent:  # it died before the signal was asked for
        os._exit(1)


def send_blocking(sock: socket.socket, *message: Any) -> None:
    """Send one message on a blocking socket (pickled whole before anything is sent)."""
    for part in frames(*message):
        sock.sendall(part)


def receive_blocking(sock: socket.socket) -> tuple[Any, ...]:
    """One message on a blocking socket (the buffers it carries are writable)."""
    size, count = _HEAD.unpack(_exactly(sock, _HEAD.size))
    sizes = struct.unpack(f"<{count}Q", _exactly(sock, count * _SIZE.size)) if count else ()
    data = _exactly(sock, size)
    buffers = [_exactly(sock, n) for n in sizes]
    message: tuple[Any, ...] = pickle.loads(data, buffers=buffers)
    return message


async def send_async(sock: socket.socket, *message: Any) -> None:
    """Send one message on a non-blocking socket, on the running loop (no stream buffering:
    the largest tensors go to the kernel as they are)."""
    loop = asyncio.get_running_loop()
    for part in frames(*message):
        await loop.sock_sendall(sock, part)


async def receive_async(sock: socket.socket) -> tuple[Any, ...] | None:
    """One message on a non-blocking socket, each buffer read straight into its own memory;
    None once the other end has gone."""
    loop = asyncio.get_running_loop()

    async def exactly(size: int) -> bytearray:
        buf = bytearray(size)
        view, got = memoryview(buf), 0
        while got < size:
            n = await loop.sock_recv_into(sock, view[got:])
            if not n:
                raise EOFError("the control channel closed")
            got += n
        return buf

    try:
        size, count = _HEAD.unpack(await exactly(_HEAD.size))
        sizes = struct.unpack(f"<{count}Q", await exactly(count * _SIZE.size)) if count else ()
        data = await exactly(size)
        buffers = [await exactly(n) for n in sizes]
    except (EOFError, ConnectionError):
        return None
    message: tuple[Any, ...] = pickle.loads(data, buffers=buffers)
    return message


def _exactly(sock: socket.socket, size: int) -> bytearray:
    buf = bytearray(size)
    view, got = memoryview(buf), 0
    while got < size:
        n = sock.recv_into(view[got:])
        if not n:
            raise EOFError("the control channel closed")
        got += n
    return buf


class Channel:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    @classmethod
    async def open(cls, sock: socket.socket) -> Channel:
        sock.setblocking(False)
        reader, writer = await asyncio.open_unix_connection(sock=sock)
        return cls(reader, writer)

    def send(self, *message: Any) -> None:
        if not self.writer.is_closing():
            self.writer.writelines(frames(*message))

    async def receive(self) -> tuple[Any, ...] | None:
        """The next message; None once the other end has gone."""
        read = self.reader.readexactly
        try:
            size, count = _HEAD.unpack(await read(_HEAD.size))
            sizes = struct.unpack(f"<{count}Q", await read(count * _SIZE.size)) if count else ()
            data = await read(size)
            buffers = [await read(n) for n in sizes]
            message: tuple[Any, ...] = pickle.loads(data, buffers=buffers)
        except (asyncio.IncompleteReadError, ConnectionError):
            return None
        return message

    def close(self) -> None:
        self.writer.close()
