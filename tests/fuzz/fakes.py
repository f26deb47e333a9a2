"""What the network-facing fuzz targets run against: a transport that records what the server
writes, a server of real routes over a small model repository, and one event loop per process.

Everything here drives the connections through their asyncio protocol methods only
(``connection_made``, ``get_buffer``/``buffer_updated`` or ``data_received``,
``connection_lost``), as the event loop does: the same code runs against the pure-Python
modules and the compiled ones.
"""

from __future__ import annotations

import asyncio
import logging
import tempfile
import traceback
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tests.conftest import EXAMPLES, TEST_MODELS

# The models the fuzzed server serves: every input they accept, they answer (none can fail).
IDENTITY = {"identity_fp32": "FP32", "identity_int64": "INT64", "identity_bytes": "BYTES"}
MODELS = ("half_plus_two",)


class RecordingTransport(asyncio.Transport):
    """A client's end that takes everything: what the server wrote, and whether it closed."""

    def __init__(self) -> None:
        super().__init__()
        self.data = bytearray()
        self.closed = False
        self.eof = False
        self.reading = True

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"peername": ("127.0.0.1", 40000), "sockname": ("127.0.0.1", 8000)}.get(
            name, default
        )

    def write(self, data: Any) -> None:
        if self.closed:
            return
        self.data += bytes(data)

    def writelines(self, list_of_data: Any) -> None:
        for part in list_of_data:
            self.write(part)

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True

    def abort(self) -> None:
        self.closed = True

    def can_write_eof(self) -> bool:
        return True

    def write_eof(self) -> None:
        self.eof = True

    def pause_reading(self) -> None:
        self.reading = False

    def resume_reading(self) -> None:
        self.reading = True

    def is_reading(self) -> bool:
        return self.reading

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        pass

    def get_write_buffer_size(self) -> int:
        return 0

    def get_write_buffer_limits(self) -> tuple[int, int]:
        return (0, 0)


def pieces(data: bytes) -> Iterator[bytes]:
    """``data`` as reads from a socket: whole, or in pieces of one size (1 to 64 bytes), chosen
    by the data itself so that a saved input replays the same way."""
    check = zlib.crc32(data)
    if check & 1:
        yield data
        return
    step = 1 + (check >> 1) % 64
    for start in range(0, len(data), step):
        yield data[start : start + step]


def deliver(protocol: asyncio.BaseProtocol, data: bytes) -> None:
    """Hand ``data`` to the protocol as the event loop would: a buffered protocol's own buffer
    filled (as many times as it takes), else ``data_received``."""
    if isinstance(protocol, asyncio.BufferedProtocol):
        view = memoryview(data)
        while view:
            buf = protocol.get_buffer(len(view))
            n = min(len(buf), len(view))
            if n == 0:
                raise AssertionError("get_buffer gave an empty buffer")
            buf[:n] = view[:n]
            protocol.buffer_updated(n)
            view = view[n:]
    else:
        assert isinstance(protocol, asyncio.Protocol)
        protocol.data_received(data)


async def settle(busy: Any, limit_s: float = 5.0) -> None:
    """Let the loop run the work the data started, until ``busy()`` is false: a request still
    unanswered after ``limit_s`` (its model answers at once) is a failure, a hang."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + limit_s
    for _ in range(3):
        await asyncio.sleep(0)
    while busy():
        assert loop.time() < deadline, f"work still unfinished after {limit_s} s"
        await asyncio.sleep(0.0005)
    for _ in range(3):
        await asyncio.sleep(0)


def build_repository(dest: Path) -> Path:
    """The fuzzed server's models: identity models of a few datatypes and half_plus_two."""
    source = (TEST_MODELS / "_identity" / "model.py").read_text()
    for name, dtype in IDENTITY.items():
        folder = dest / name
        folder.mkdir(parents=True)
        (folder / "model.py").write_text(source)
        (folder / "model.yaml").write_text(
            "runtime: python\nclass: Identity\n"
            f"inputs: [{{name: INPUT0, datatype: {dtype}, shape: [-1, -1]}}]\n"
            f"outputs: [{{name: OUTPUT0, datatype: {dtype}, shape: [-1, -1]}}]\n"
        )
    for name in MODELS:
        target = dest / name
        target.mkdir()
        for item in (EXAMPLES / name).iterdir():
            if item.is_file():
                (target / item.name).write_bytes(item.read_bytes())
            elif item.is_dir() and not item.name.startswith("__"):
                (target / item.name).symlink_to(item)
    return dest


class Faults(logging.Handler):
    """The errors the server logs: each is a fault of ours (an exception it did not expect),
    whatever it answered."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.records: list[logging.LogRecord] = []
        logging.getLogger("rosettaserve").addHandler(self)

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    def check(self) -> None:
        """Fail on what was logged since the last check."""
        records, self.records = self.records, []
        if records:
            first = records[0]
            trace = "".join(traceback.format_exception(*first.exc_info)) if first.exc_info else ""
            raise AssertionError(f"the server logged an error: {first.getMessage()}\n{trace}")


class Harness:
    """One event loop and one server (real routes, real models) for the whole fuzzing run."""

    _instance: Harness | None = None

    def __init__(self) -> None:
        from rosettaserve.server.server import Server
        from rosettaserve.server.settings import Settings

        self.faults = Faults()
        self.loop = asyncio.new_event_loop()
        asyncio.set_event_loop(self.loop)
        self._tmp = tempfile.TemporaryDirectory(prefix="rosettaserve-fuzz-")
        repo = build_repository(Path(self._tmp.name) / "models")
        self.server = Server(Settings(repository=repo, max_request_size=1 << 20))
        self.loop.run_until_complete(self.server.repository.load_all())
        self.server.dataplane.started = True
        self.grpc = self.server._grpc_server()  # the gRPC port's services, not listening

    @classmethod
    def get(cls) -> Harness:
        if cls._instance is None:
            cls._instance = Harness()
        return cls._instance

    def run(self, coro: Any) -> Any:
        """Run ``coro`` on the loop; fail if the server logged an error meanwhile."""
        result = self.loop.run_until_complete(coro)
        self.faults.check()
        return result
