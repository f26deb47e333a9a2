"""Peers that are not PD instances, on loopback, for the PD trust tests: a ``Listener`` that
records every connection and byte it gets (where a request would hand a prompt and the peer key
over), and a ``StuckDecode`` instance that accepts hand-overs and never fetches their caches
(a decode instance that hangs after it agreed)."""

from __future__ import annotations

import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


def free_port(host: str = "127.0.0.1") -> int:
    """A port free now on ``host`` (for a process that must be told its peer's port first)."""
    with socket.socket() as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


class Listener:
    """Accepts connections on ``host`` and keeps what each one sends; answers nothing."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0) -> None:
        self.sock = socket.create_server((host, port))
        self.port = int(self.sock.getsockname()[1])
        self.connections: list[bytes] = []
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with self._lock:
                self.connections.append(b"")
                index = len(self.connections) - 1
            threading.Thread(target=self._read, args=(conn, index), daemon=True).start()

    def _read(self, conn: socket.socket, index: int) -> None:
        with conn:
            conn.settimeout(10)
            while True:
                try:
                    data = conn.recv(65536)
                except OSError:
                    return
                if not data:
                    return
                with self._lock:
                    self.connections[index] += data

    def received(self) -> list[bytes]:
        with self._lock:
            return list(self.connections)

    def close(self) -> None:
        self.sock.close()


class StuckDecode:
    """Answers ``POST /v1/pd/decode`` as a decode instance does (it agrees), keeps each
    hand-over's body and headers, and does nothing more."""

    def __init__(self) -> None:
        self.handovers: list[tuple[dict[str, Any], dict[str, str]]] = []
        handovers = self.handovers

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length", "0")))
                headers = {k.lower(): v for k, v in self.headers.items()}
                handovers.append((json.loads(body), headers))
                reply = b'{"isValidDecodeParameters": true, "errorMessage": ""}'
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = int(self.server.server_address[1])
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
