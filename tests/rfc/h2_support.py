"""An HTTP/2 client of raw frames for the RFC 9113 and RFC 7541 tests (tests/rfc/test_rfc9113_*,
test_rfc7541_*): frames go out exactly as a test builds them, with no state machine of a client
library to refuse or fix them, and every frame the server sends is kept, its header blocks decoded
in order (python-hyper's ``hpack``). Every socket operation and every wait is bounded in time.

The server under test is a real process on a repository of one model, ``slow_python``, whose
"sleep" parameter keeps a call at work as long as a test needs.
"""

from __future__ import annotations

import contextlib
import shutil
import socket
import struct
import time
from collections.abc import Callable, Iterator, Sequence
from typing import NamedTuple

import hpack
import numpy as np
import pytest

from rosettaserve.protocols.oip.pb import grpc_service_pb2 as pb
from tests.conftest import TEST_MODELS
from tests.integration.h2client import frame_names, grpc_frame, grpc_messages, raw_frame
from tests.serverproc import ServerProcess, served, start_server

TIMEOUT_S = 10.0
PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
DATA, HEADERS, PRIORITY, RST_STREAM, SETTINGS, PUSH_PROMISE, PING, GOAWAY = range(8)
WINDOW_UPDATE, CONTINUATION = 8, 9
END_STREAM = ACK = 0x1
END_HEADERS, PADDED, PRIORITY_FLAG = 0x4, 0x8, 0x20
NO_ERROR, PROTOCOL_ERROR, INTERNAL_ERROR, FLOW_CONTROL_ERROR = 0, 1, 2, 3
STREAM_CLOSED, FRAME_SIZE_ERROR, REFUSED_STREAM, CANCEL = 5, 6, 7, 8
COMPRESSION_ERROR = 9
HEADER_TABLE_SIZE, ENABLE_PUSH, MAX_CONCURRENT_STREAMS, INITIAL_WINDOW_SIZE = 1, 2, 3, 4
MAX_FRAME_SIZE, MAX_HEADER_LIST_SIZE = 5, 6
INFER = "/inference.GRPCInferenceService/ModelInfer"
MODEL = "slow_python"


def h2_server(
    tmp_path_factory: pytest.TempPathFactory, name: str, *flags: str
) -> Iterator[ServerProcess]:
    """A module fixture's body: a server on a repository of ``slow_python`` alone."""
    repo = tmp_path_factory.mktemp(name)
    shutil.copytree(TEST_MODELS / MODEL, repo / MODEL)
    yield from served(start_server(repo, *flags))


def infer_message(sleep: float = 0.0, values: Sequence[float] = (1.0, 2.0)) -> bytes:
    """A ModelInfer request for ``slow_python``, framed as a gRPC message."""
    request = pb.ModelInferRequest(model_name=MODEL)
    request.inputs.add(name="INPUT0", datatype="FP32", shape=[len(values)])
    request.raw_input_contents.append(np.asarray(values, dtype="<f4").tobytes())
    if sleep:
        request.parameters["sleep"].double_param = sleep
    return grpc_frame(request.SerializeToString())


def request_fields(
    path: str = INFER, extra: Sequence[tuple[str, str]] = ()
) -> list[tuple[str, str]]:
    """The fields of a well-formed gRPC request, then ``extra``."""
    return [
        (":method", "POST"),
        (":scheme", "http"),
        (":path", path),
        (":authority", "localhost"),
        ("content-type", "application/grpc"),
        ("te", "trailers"),
        *extra,
    ]


def settings_payload(settings: Sequence[tuple[int, int]]) -> bytes:
    return b"".join(struct.pack(">HL", key, value) for key, value in settings)


def u32(value: int) -> bytes:
    return struct.pack(">L", value)


class Frame(NamedTuple):
    kind: int
    flags: int
    stream_id: int
    payload: bytes


class RawH2:
    """One connection: ``with RawH2(address) as c: ...``. With ``handshake``, the preface and
    SETTINGS (``settings`` added) go out at once and the server's SETTINGS and its ACK of ours
    are awaited; the server's SETTINGS are acknowledged as they come."""

    def __init__(
        self, address: str, *, settings: Sequence[tuple[int, int]] = (), handshake: bool = True
    ) -> None:
        host, port = address.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=TIMEOUT_S)
        self.encoder = hpack.Encoder()
        self.decoder = hpack.Decoder()
        self.frames: list[Frame] = []
        self.blocks: dict[int, list[dict[str, str]]] = {}  # decoded header blocks, per stream
        self.data: dict[int, bytes] = {}
        self.received = b""  # every byte, for failure messages
        self.eof = False
        self.next_id = 1
        self._rest = b""
        self._block = b""
        if handshake:
            self.send(PREFACE + raw_frame(SETTINGS, 0, 0, settings_payload(settings)))
            self.wait(lambda f: f.kind == SETTINGS and not f.flags & ACK)
            self.wait(lambda f: f.kind == SETTINGS and bool(f.flags & ACK))

    def __enter__(self) -> RawH2:
        return self

    def __exit__(self, *exc: object) -> None:
        self.sock.close()

    # -- sending ------------------------------------------------------------------------------

    def send(self, data: bytes) -> None:
        """Bytes onto the socket; a write refused because the server closed is not an error."""
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            self.sock.sendall(data)

    def frame(self, kind: int, flags: int, stream_id: int, payload: bytes = b"") -> None:
        self.send(raw_frame(kind, flags, stream_id, payload))

    def block(self, fields: Sequence[tuple[str | bytes, str | bytes]]) -> bytes:
        """The header block of ``fields`` from this connection's encoder (its table moves)."""
        return bytes(self.encoder.encode(list(fields)))

    def new_stream(self) -> int:
        stream_id = self.next_id
        self.next_id += 2
        return stream_id

    def headers(
        self,
        fields: Sequence[tuple[str | bytes, str | bytes]],
        *,
        stream_id: int | None = None,
        end_stream: bool = False,
    ) -> int:
        """HEADERS with ``fields`` on ``stream_id`` (a new stream by default); its id."""
        if stream_id is None:
            stream_id = self.new_stream()
        flags = END_HEADERS | (END_STREAM if end_stream else 0)
        self.frame(HEADERS, flags, stream_id, self.block(fields))
        return stream_id

    def request(
        self,
        fields: Sequence[tuple[str | bytes, str | bytes]] | None = None,
        body: bytes | None = None,
    ) -> int:
        """A whole request: HEADERS, then ``body`` (a ModelInfer by default) ending the stream."""
        stream_id = self.headers(request_fields() if fields is None else fields)
        self.frame(DATA, END_STREAM, stream_id, infer_message() if body is None else body)
        return stream_id

    # -- receiving ----------------------------------------------------------------------------

    def _read(self, timeout: float) -> None:
        self.sock.settimeout(max(timeout, 0.001))
        try:
            data = self.sock.recv(1 << 20)
        except TimeoutError:
            return
        except ConnectionResetError:
            data = b""
        if not data:
            self.eof = True
            return
        self.received += data
        self._rest += data
        while len(self._rest) >= 9:
            length = int.from_bytes(self._rest[:3], "big")
            if len(self._rest) < 9 + length:
                break
            kind, flags = self._rest[3], self._rest[4]
            stream_id = int.from_bytes(self._rest[5:9], "big") & 0x7FFFFFFF
            frame = Frame(kind, flags, stream_id, self._rest[9 : 9 + length])
            self._rest = self._rest[9 + length :]
            self._take(frame)

    def _take(self, frame: Frame) -> None:
        self.frames.append(frame)
        if frame.kind == SETTINGS and not frame.flags & ACK:
            self.frame(SETTINGS, ACK, 0)
        elif frame.kind == DATA:
            self.data[frame.stream_id] = self.data.get(frame.stream_id, b"") + frame.payload
        elif frame.kind in (HEADERS, CONTINUATION):
            self._block += frame.payload
            if frame.flags & END_HEADERS:
                fields = self.decoder.decode(self._block)
                self._block = b""
                self.blocks.setdefault(frame.stream_id, []).append(dict(fields))

    def wait(self, found: Callable[[Frame], bool], timeout: float = TIMEOUT_S) -> Frame:
        """The first frame received (from the start) for which ``found`` is true."""
        deadline = time.monotonic() + timeout
        checked = 0
        while True:
            for frame in self.frames[checked:]:
                if found(frame):
                    return frame
            checked = len(self.frames)
            left = deadline - time.monotonic()
            if self.eof or left <= 0:
                state = "closed" if self.eof else "still open"
                raise AssertionError(f"not received; the connection is {state}: {self.seen()}")
            self._read(left)

    def wait_quiet(self, seconds: float) -> None:
        """A pause of the client's: ``seconds`` sending nothing, reading what comes."""
        deadline = time.monotonic() + seconds
        while not self.eof and (left := deadline - time.monotonic()) > 0:
            self._read(left)

    def seen(self) -> list[str]:
        return frame_names(self.received)

    def sync(self) -> None:
        """A PING and its ACK: the server has handled everything sent before."""
        opaque = struct.pack(">d", time.monotonic())
        self.frame(PING, 0, 0, opaque)
        self.wait(lambda f: f.kind == PING and bool(f.flags & ACK) and f.payload == opaque)

    def ended(self, stream_id: int, timeout: float = TIMEOUT_S) -> Frame:
        """The frame that ended the stream: one with END_STREAM, or a RST_STREAM."""

        def ends(f: Frame) -> bool:
            if f.stream_id != stream_id:
                return False
            return f.kind == RST_STREAM or (
                f.kind in (HEADERS, DATA) and bool(f.flags & END_STREAM)
            )

        return self.wait(ends, timeout)

    def assert_ok(self, stream_id: int) -> None:
        """The stream ends with a reply of gRPC status OK, not reset."""
        end = self.ended(stream_id)
        assert end.kind != RST_STREAM, self.seen()
        assert self.grpc_status(stream_id) == "0", self.seen()

    def wait_closed(self, timeout: float = TIMEOUT_S) -> None:
        deadline = time.monotonic() + timeout
        while not self.eof:
            left = deadline - time.monotonic()
            assert left > 0, f"the connection is still open: {self.seen()}"
            self._read(left)

    # -- what the server said -----------------------------------------------------------------

    def goaways(self) -> list[Frame]:
        return [f for f in self.frames if f.kind == GOAWAY]

    def resets(self, stream_id: int) -> list[int]:
        return [_code(f) for f in self.frames if f.kind == RST_STREAM and f.stream_id == stream_id]

    def expect_goaway(self, code: int) -> str:
        """A connection error: GOAWAY with ``code``, then the server closes; its debug text."""
        goaway = self.wait(lambda f: f.kind == GOAWAY)
        error = struct.unpack(">L", goaway.payload[4:8])[0]
        assert error == code, f"GOAWAY {error}, not {code}: {self.seen()}"
        self.wait_closed()
        return goaway.payload[8:].decode(errors="replace")

    def expect_reset(self, stream_id: int, code: int) -> None:
        """A stream error: RST_STREAM with ``code`` on the stream, and the connection goes on."""
        reset = self.wait(lambda f: f.kind == RST_STREAM and f.stream_id == stream_id)
        assert _code(reset) == code, f"RST_STREAM {_code(reset)}, not {code}: {self.seen()}"
        self.serves()

    def serves(self) -> None:
        """A well-formed call on this connection succeeds (and no GOAWAY came)."""
        stream_id = self.request()
        self.assert_ok(stream_id)
        reply = pb.ModelInferResponse.FromString(grpc_messages(self.data[stream_id])[0])
        assert reply.raw_output_contents[0] == np.asarray([1.0, 2.0], "<f4").tobytes()
        assert not self.goaways(), self.seen()

    def grpc_status(self, stream_id: int) -> str | None:
        blocks = self.blocks.get(stream_id, [])
        return blocks[-1].get("grpc-status") if blocks else None

    def http_status(self, stream_id: int) -> str | None:
        blocks = self.blocks.get(stream_id, [])
        return blocks[0].get(":status") if blocks else None


def _code(frame: Frame) -> int:
    return int(struct.unpack(">L", frame.payload[:4])[0])


def serves_new(server: ServerProcess) -> None:
    """A new connection to the server serves a call: the server is fine."""
    with RawH2(server.grpc_address) as c:
        c.serves()
