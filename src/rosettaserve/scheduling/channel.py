"""The control channel between the supervisor and a worker process: a socketpair carrying
length-prefixed pickled tuples (both ends are this server's own processes)."""

from __future__ import annotations

import asyncio
import pickle
import socket
import struct
from typing import Any

_LENGTH = struct.Struct("<I")


def encode(*message: Any) -> bytes:
    data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    return _LENGTH.pack(len(data)) + data


def receive_blocking(sock: socket.socket) -> tuple[Any, ...]:
    """One message, before any event loop runs (the worker's settings)."""
    (size,) = _LENGTH.unpack(_exactly(sock, _LENGTH.size))
    message: tuple[Any, ...] = pickle.loads(_exactly(sock, size))
    return message


def _exactly(sock: socket.socket, size: int) -> bytes:
    chunks, left = [], size
    while left:
        chunk = sock.recv(left)
        if not chunk:
            raise EOFError("the control channel closed")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


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
            self.writer.write(encode(*message))

    async def receive(self) -> tuple[Any, ...] | None:
        """The next message; None once the other end has gone."""
        try:
            (size,) = _LENGTH.unpack(await self.reader.readexactly(_LENGTH.size))
            message: tuple[Any, ...] = pickle.loads(await self.reader.readexactly(size))
        except (asyncio.IncompleteReadError, ConnectionError):
            return None
        return message

    def close(self) -> None:
        self.writer.close()
