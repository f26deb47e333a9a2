"""The HTTP/2 port: listens, runs one ``h2.Connection`` per client, and shuts down in two
steps (a GOAWAY to each connection, then the close once the calls at work are done).
"""

from __future__ import annotations

import asyncio
import socket
import ssl

from rosettaserve.transport.body_pace import BodyPace
from rosettaserve.transport.coalesce import WriteRound
from rosettaserve.transport.defaults import DEFAULT_SEND_TIMEOUT
from rosettaserve.transport.h2 import IDLE_TIMEOUT_S, App, Connection
from rosettaserve.transport.sockets import listen


class H2Server:
    """Listens, and runs one ``Connection`` per client, all answering through ``app``."""

    def __init__(
        self,
        app: App,
        idle_timeout: float = IDLE_TIMEOUT_S,
        send_timeout: float = DEFAULT_SEND_TIMEOUT,
        pace: BodyPace | None = None,
    ) -> None:
        self.app = app
        self.idle_timeout = idle_timeout
        self.send_timeout = send_timeout  # an answer the client takes nothing of, this long
        self.pace = pace or BodyPace()  # how slowly a request may come (h2_stalls)
        self.connections: set[Connection] = set()
        self.round = WriteRound()
        self.closing = False
        self._server: asyncio.Server | None = None
        self._sweeper: asyncio.Task[None] | None = None

    async def start(self, sock: socket.socket, tls: ssl.SSLContext | None = None) -> None:
        period = min(self.idle_timeout, self.send_timeout, self.pace.timeout)
        self._server, self._sweeper = await listen(
            sock, lambda: Connection(self), self.connections, period, tls
        )

    def stop_accepting(self) -> None:
        """No new connections, and a GOAWAY on each open one: no new streams."""
        self.closing = True
        if self._server is not None:
            self._server.close()
        if self._sweeper is not None:
            self._sweeper.cancel()
        for conn in list(self.connections):
            conn.shut()
            if not conn.busy:
                conn.close()

    def close_all(self) -> None:
        for conn in list(self.connections):
            conn.close()
