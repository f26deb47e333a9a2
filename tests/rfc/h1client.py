"""A raw HTTP/1.1 client for the RFC 9112 tests: bytes exactly as written, answers read by their
own framing (so one answer too many, or a body where none belongs, shows)."""

from __future__ import annotations

import shutil
import socket
import time
from dataclasses import dataclass, field
from pathlib import Path

from tests.conftest import EXAMPLES, TEST_MODELS
from tests.serverproc import ServerProcess

TIMEOUT_S = 20.0  # the longest any read waits (an upper bound against hangs)
INFER = b'{"inputs": [{"name": "x", "datatype": "FP32", "shape": [2], "data": [1.0, 2.0]}]}'
INFER_PATH = b"/v2/models/half_plus_two/infer"


def small_repo(dest: Path) -> Path:
    """A fast model, a slow one (its "sleep" parameter) and a streaming one."""
    for source in (EXAMPLES / "half_plus_two", EXAMPLES / "words_stream_python"):
        shutil.copytree(source, dest / source.name)
    shutil.copytree(TEST_MODELS / "slow_python", dest / "slow_python")
    return dest


def slow_infer(seconds: float) -> bytes:
    body = (
        b'{"parameters": {"sleep": %.3f}, "inputs": [{"name": "INPUT0", "datatype": "FP32", '
        b'"shape": [1], "data": [7.0]}]}' % seconds
    )
    return post(b"/v2/models/slow_python/infer", body)


def post(path: bytes, body: bytes, extra: bytes = b"", version: bytes = b"HTTP/1.1") -> bytes:
    return (
        b"POST %s %s\r\nHost: t\r\nContent-Type: application/json\r\n%sContent-Length: %d\r\n\r\n%s"
        % (
            path,
            version,
            extra,
            len(body),
            body,
        )
    )


def get(path: bytes, extra: bytes = b"", method: bytes = b"GET") -> bytes:
    return b"%s %s HTTP/1.1\r\nHost: t\r\n%s\r\n" % (method, path, extra)


@dataclass
class Answer:
    status: int
    reason: bytes
    headers: list[tuple[str, str]]
    body: bytes = b""
    version: bytes = b""
    chunks: list[bytes] = field(default_factory=list)

    def header(self, name: str) -> str | None:
        values = [v for k, v in self.headers if k == name]
        assert len(values) <= 1, f"{name} {len(values)} times"
        return values[0] if values else None


class Client:
    """One connection to the server's HTTP port."""

    def __init__(self, server: ServerProcess, rcvbuf: int = 0) -> None:
        host, port = server.http_hostport.rsplit(":", 1)
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        if rcvbuf:
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        self.sock.settimeout(TIMEOUT_S)
        self.sock.connect((host, int(port)))
        self.buffer = b""
        self.eof = False

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.sock.close()

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def _fill(self) -> bool:
        if self.eof:
            return False
        try:
            data = self.sock.recv(65536)
        except ConnectionResetError:
            data = b""
        if not data:
            self.eof = True
            return False
        self.buffer += data
        return True

    def _take(self, size: int) -> bytes:
        while len(self.buffer) < size:
            assert self._fill(), f"the connection closed {size - len(self.buffer)} bytes short"
        taken, self.buffer = self.buffer[:size], self.buffer[size:]
        return taken

    def _line(self) -> bytes:
        while b"\r\n" not in self.buffer:
            assert self._fill(), f"the connection closed inside a line: {self.buffer[:200]!r}"
        line, self.buffer = self.buffer.split(b"\r\n", 1)
        return line

    def answer(self, method: bytes = b"GET") -> Answer:
        """The next answer, read by its framing (none for HEAD, 1xx, 204, 304)."""
        status_line = self._line()
        version, status, reason = [*status_line.split(b" ", 2), b""][:3]
        assert version in (b"HTTP/1.1", b"HTTP/1.0"), status_line
        headers: list[tuple[str, str]] = []
        while line := self._line():
            name, _, value = line.partition(b":")
            headers.append((name.decode().lower(), value.strip().decode("latin-1")))
        answer = Answer(int(status), reason, headers, version=version)
        if method == b"HEAD" or answer.status < 200 or answer.status in (204, 304):
            return answer
        length = answer.header("content-length")
        if answer.header("transfer-encoding") == "chunked":
            assert length is None, "both content-length and chunked"
            while size := int(self._line(), 16):
                answer.chunks.append(self._take(size))
                assert self._line() == b""
            assert self._line() == b""
            answer.body = b"".join(answer.chunks)
        elif length is not None:
            answer.body = self._take(int(length))
        else:
            answer.body = self.rest()
        return answer

    def rest(self) -> bytes:
        """Everything until the server closes."""
        while self._fill():
            pass
        rest, self.buffer = self.buffer, b""
        return rest

    def closed(self) -> bool:
        """Whether the server closed the connection with nothing more written."""
        return self.rest() == b""


def vm_rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def wait_for(condition: object, timeout: float = TIMEOUT_S) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if callable(condition) and condition():
            return
        time.sleep(0.05)
    raise AssertionError("condition not met in time")
