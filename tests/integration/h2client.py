"""A small blocking gRPC-over-HTTP/2 client on python-hyper's ``h2`` (sans-IO) and a plain socket,
for black-box tests of a gRPC port at the HTTP/2 level: every frame the server sends is seen (as
h2 events, and as raw bytes), and a test can send frames no gRPC library would.

Every socket operation has a timeout and every wait an overall deadline, so a test never hangs.
"""

from __future__ import annotations

import gzip
import socket
import struct
import time
import urllib.parse
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import h2.config
import h2.connection
import h2.events
import h2.settings
from hyperframe.frame import Frame

TIMEOUT_S = 10.0
DATA, HEADERS, RST_STREAM, GOAWAY, CONTINUATION = 0x0, 0x1, 0x3, 0x7, 0x9
END_STREAM, END_HEADERS = 0x1, 0x4


# -- gRPC messages ------------------------------------------------------------------------------


def grpc_frame(
    payload: bytes, *, compressed: bool = False, declared_length: int | None = None
) -> bytes:
    """A gRPC length-prefixed message: 1-byte compressed flag, 4-byte big-endian length, bytes.
    ``declared_length`` lies about the length (the payload goes as given)."""
    length = len(payload) if declared_length is None else declared_length
    return struct.pack(">BI", int(compressed), length) + payload


def grpc_messages(data: bytes, encoding: str | None = None) -> list[bytes]:
    """The messages in a gRPC body (gzip-compressed ones decompressed)."""
    messages = []
    while data:
        assert len(data) >= 5, f"a truncated message prefix: {data!r}"
        flag, length = struct.unpack(">BI", data[:5])
        payload = data[5 : 5 + length]
        assert len(payload) == length, f"a truncated message: {len(payload)} of {length} bytes"
        if flag:
            assert encoding == "gzip", f"a compressed message with grpc-encoding {encoding!r}"
            payload = gzip.decompress(payload)
        messages.append(payload)
        data = data[5 + length :]
    return messages


# -- HTTP/2 frames by hand ----------------------------------------------------------------------


def raw_frame(frame_type: int, flags: int, stream_id: int, payload: bytes) -> bytes:
    """An HTTP/2 frame built by hand (any length, any type): the 9-byte header, then payload."""
    length = len(payload).to_bytes(3, "big")
    return length + struct.pack(">BBI", frame_type, flags, stream_id) + payload


def split_frames(data: bytes) -> list[tuple[int, int, int, bytes]]:
    """``data`` (whole frames) as (type, flags, stream id, payload) tuples."""
    frames = []
    while len(data) >= 9:
        length = int.from_bytes(data[:3], "big")
        stream_id = int.from_bytes(data[5:9], "big") & 0x7FFFFFFF
        frames.append((data[3], data[4], stream_id, data[9 : 9 + length]))
        data = data[9 + length :]
    return frames


def frame_names(data: bytes) -> list[str]:
    """The frames in ``data``, readable: for failure messages and the record."""
    names = []
    for frame_type, flags, stream_id, payload in split_frames(data):
        frame, _ = Frame.parse_frame_header(
            memoryview(raw_frame(frame_type, flags, stream_id, b""))
        )
        try:
            frame.parse_body(memoryview(payload))
            names.append(repr(frame))
        except Exception:
            names.append(f"frame type {frame_type} flags {flags} stream {stream_id}")
    return names


def hpack_int(value: int, prefix_bits: int, first: int = 0) -> bytes:
    """An HPACK integer (RFC 7541 5.1) with the given prefix, high bits of its first octet set
    to ``first``."""
    limit = (1 << prefix_bits) - 1
    if value < limit:
        return bytes([first | value])
    out, value = [first | limit], value - limit
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    return bytes([*out, value])


def literal_never_indexed(name: bytes, value: bytes) -> bytes:
    """A header field as an HPACK literal that is never indexed and not Huffman-coded (so it
    leaves both sides' dynamic tables alone: it can be added to any block h2 encoded)."""
    return b"\x10" + hpack_int(len(name), 7) + name + hpack_int(len(value), 7) + value


def recut_headers(data: bytes, *, piece: int, extra_block: bytes = b"") -> bytes:
    """``data`` as h2 would send it, with each HEADERS frame's block (plus ``extra_block``
    appended) cut into a HEADERS frame and CONTINUATION frames of at most ``piece`` bytes of
    block each; other frames unchanged."""
    out = b""
    for frame_type, flags, stream_id, payload in split_frames(data):
        if frame_type != HEADERS:
            out += raw_frame(frame_type, flags, stream_id, payload)
            continue
        assert flags & END_HEADERS, flags
        assert not flags & ~(END_HEADERS | END_STREAM), flags  # no padding, no priority
        block = payload + extra_block
        chunks = [block[i : i + piece] for i in range(0, len(block), piece)]
        assert len(chunks) >= 2, "the header block is too small to cut"
        out += raw_frame(HEADERS, flags & END_STREAM, stream_id, chunks[0])
        for i, chunk in enumerate(chunks[1:], start=2):
            out += raw_frame(CONTINUATION, END_HEADERS if i == len(chunks) else 0, stream_id, chunk)
    return out


# -- the client ---------------------------------------------------------------------------------


@dataclass
class Reply:
    """One stream as the client saw it."""

    stream_id: int
    headers: dict[str, str] = field(default_factory=dict)  # the first header block
    trailers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""
    ended: bool = False  # END_STREAM received
    reset: int | None = None  # the RST_STREAM error code, if the server reset the stream
    events: list[h2.events.Event] = field(default_factory=list)

    @property
    def done(self) -> bool:
        return self.ended or self.reset is not None

    @property
    def http_status(self) -> int | None:
        status = self.headers.get(":status")
        return None if status is None else int(status)

    @property
    def trailers_only(self) -> bool:
        """The status came in the response headers (a gRPC "Trailers-Only" response)."""
        return not self.trailers and "grpc-status" in self.headers

    @property
    def status_headers(self) -> dict[str, str]:
        return self.headers if self.trailers_only else self.trailers

    @property
    def grpc_status(self) -> int | None:
        status = self.status_headers.get("grpc-status")
        return None if status is None else int(status)

    @property
    def grpc_message(self) -> str:
        return urllib.parse.unquote(self.status_headers.get("grpc-message", ""))

    @property
    def messages(self) -> list[bytes]:
        return grpc_messages(self.body, self.headers.get("grpc-encoding"))

    @property
    def ok(self) -> bool:
        return self.http_status == 200 and self.grpc_status == 0 and self.reset is None

    def describe(self) -> str:
        """The outcome in one line, for failure messages and the record."""
        return (
            f"HTTP {self.http_status}, grpc-status {self.grpc_status}, "
            f"grpc-message {self.grpc_message!r}, RST_STREAM {self.reset}, "
            f"trailers-only {self.trailers_only}, {len(self.body)} body bytes"
        )


class ConnectionGone(Exception):
    """The server ended the connection (GOAWAY, or closed the socket) while the client waited."""


class H2Client:
    """One HTTP/2 connection to a gRPC server: ``with H2Client(address) as client: ...``.

    The preface and SETTINGS go out at once (``settings`` adds to h2's defaults), and the
    constructor waits for the server's SETTINGS and its ACK of ours. Received DATA is
    acknowledged as it is read, so the server's view of the windows moves on."""

    def __init__(
        self,
        address: str,
        *,
        settings: dict[h2.settings.SettingCodes | int, int] | None = None,
        timeout: float = TIMEOUT_S,
    ) -> None:
        host, port = address.rsplit(":", 1)
        self.authority = address
        self.timeout = timeout
        self.sock = socket.create_connection((host, int(port)), timeout=timeout)
        config = h2.config.H2Configuration(client_side=True, header_encoding="utf-8")
        self.conn = h2.connection.H2Connection(config=config)
        self.events: list[h2.events.Event] = []  # every event, in order
        self.received = bytearray()  # every byte the server sent, for the record
        self.replies: dict[int, Reply] = {}
        self.goaway: h2.events.ConnectionTerminated | None = None
        self.eof = False  # the server closed its end (or reset the TCP connection)
        self.send_failed = False  # a write failed: the server had closed the connection
        self.settings_received = self.settings_acked = False
        self.conn.initiate_connection()
        if settings:
            self.conn.update_settings(settings)
        self.flush()
        self.read_until(lambda: self.settings_received and self.settings_acked)

    def __enter__(self) -> H2Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.sock.close()

    # -- bytes in and out ---------------------------------------------------------------------

    def flush(self) -> None:
        self.send_raw(self.conn.data_to_send())

    def send_raw(self, data: bytes) -> None:
        """Bytes straight onto the socket, past h2's state machine. A write the server refuses
        (it closed the connection) is noted in ``send_failed``, not raised: what the server
        said before it closed is still there to read."""
        if not data or self.send_failed:
            return
        self.sock.settimeout(self.timeout)
        try:
            self.sock.sendall(data)
        except (BrokenPipeError, ConnectionResetError):
            self.send_failed = True

    @property
    def closed(self) -> bool:
        return self.eof or self.goaway is not None

    def receive_once(self, timeout: float | None = None) -> bool:
        """Read what the server sent (waiting at most ``timeout``) and handle its events;
        False if nothing came in time."""
        self.sock.settimeout(self.timeout if timeout is None else max(timeout, 0.001))
        try:
            data = self.sock.recv(1 << 20)
        except TimeoutError:
            return False
        except ConnectionResetError:
            data = b""
        if not data:
            self.eof = True
            return True
        self.received += data
        if self.goaway is None:  # after a GOAWAY, the rest is not parsed
            self.handle(self.conn.receive_data(data))
            self.flush()
        return True

    def handle(self, events: list[h2.events.Event]) -> None:
        for event in events:
            self.events.append(event)
            stream_id = getattr(event, "stream_id", None)
            reply = self.replies.get(stream_id) if stream_id else None
            if reply is not None:
                reply.events.append(event)
            if isinstance(event, h2.events.RemoteSettingsChanged):
                self.settings_received = True
            elif isinstance(event, h2.events.SettingsAcknowledged):
                self.settings_acked = True
            elif isinstance(event, h2.events.ConnectionTerminated):
                self.goaway = event
            elif reply is None:
                continue
            elif isinstance(event, h2.events.ResponseReceived):
                reply.headers = header_dict(event.headers)
            elif isinstance(event, h2.events.TrailersReceived):
                reply.trailers = header_dict(event.headers)
            elif isinstance(event, h2.events.DataReceived):
                reply.body += event.data or b""
                # the window goes back as the data is read (h2 sends WINDOW_UPDATE once
                # enough is acknowledged), so flow control moves on
                size = event.flow_controlled_length or 0
                self.conn.acknowledge_received_data(size, reply.stream_id)
            elif isinstance(event, h2.events.StreamEnded):
                reply.ended = True
            elif isinstance(event, h2.events.StreamReset):
                reply.reset = int(event.error_code or 0)

    def read_until(self, done: Callable[[], bool], timeout: float | None = None) -> None:
        """Read and handle frames until ``done()``; ConnectionGone if the connection ends first,
        TimeoutError if the deadline passes."""
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        while not done():
            if self.closed:
                raise ConnectionGone(self.describe_close())
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"no answer in time; the server sent {self.frames()}")
            self.receive_once(left)

    def wait_closed(self, timeout: float | None = None) -> None:
        """Read until the server closes the socket (TimeoutError if it does not in time)."""
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        while not self.eof:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("the connection is still open: " + self.describe_close())
            self.receive_once(left)

    def frames(self) -> list[str]:
        return frame_names(bytes(self.received))

    def describe_close(self) -> str:
        closed = f"socket closed by the server: {self.eof}"
        if self.goaway is None:
            return f"no GOAWAY, {closed}"
        code = self.goaway.error_code
        name = getattr(code, "name", code)
        return (
            f"GOAWAY {name} ({int(code or 0)}), last stream {self.goaway.last_stream_id}, "
            f"debug data {self.goaway.additional_data!r}, {closed}"
        )

    # -- calls --------------------------------------------------------------------------------

    def request_headers(
        self, path: str, extra: Sequence[tuple[str, str]] = ()
    ) -> list[tuple[str, str]]:
        return [
            (":method", "POST"),
            (":scheme", "http"),
            (":path", path),
            (":authority", self.authority),
            ("content-type", "application/grpc"),
            ("te", "trailers"),
            *extra,
        ]

    def open_stream(self) -> int:
        """A new stream id with a Reply to collect what comes back on it (nothing sent yet)."""
        stream_id = self.conn.get_next_available_stream_id()
        self.replies[stream_id] = Reply(stream_id)
        return stream_id

    def start(
        self,
        path: str,
        extra: Sequence[tuple[str, str]] = (),
        *,
        headers: Sequence[tuple[str, str]] | None = None,
    ) -> int:
        """Open a stream with a gRPC request's headers plus ``extra`` (or exactly ``headers``);
        its id."""
        stream_id = self.open_stream()
        block = self.request_headers(path, extra) if headers is None else headers
        self.conn.send_headers(stream_id, block)
        self.flush()
        return stream_id

    def send(self, stream_id: int, data: bytes, *, end_stream: bool = True) -> None:
        """``data`` on the stream in frames that fit the server's windows and frame size,
        waiting for WINDOW_UPDATEs as needed; stops early if the stream ends meanwhile."""
        reply = self.replies[stream_id]
        view = memoryview(data)
        while not reply.done:
            room = min(
                self.conn.local_flow_control_window(stream_id), self.conn.max_outbound_frame_size
            )
            if view and room <= 0:
                self.read_until(
                    lambda: reply.done or self.conn.local_flow_control_window(stream_id) > 0
                )
                continue
            chunk, view = view[:room], view[room:]
            self.conn.send_data(stream_id, bytes(chunk), end_stream=end_stream and not view)
            self.flush()
            if not view:
                return

    def wait(self, stream_id: int, timeout: float | None = None) -> Reply:
        """Read until the stream ends or is reset; its Reply."""
        reply = self.replies[stream_id]
        self.read_until(lambda: reply.done, timeout)
        return reply

    def call(
        self,
        path: str,
        *messages: bytes,
        extra: Sequence[tuple[str, str]] = (),
        compressed: bool = False,
        timeout: float | None = None,
    ) -> Reply:
        """A whole call: headers, the messages (framed), end of stream, then the reply."""
        stream_id = self.start(path, extra)
        body = b"".join(grpc_frame(m, compressed=compressed) for m in messages)
        self.send(stream_id, body)
        return self.wait(stream_id, timeout)

    def ping(self, opaque: bytes, timeout: float | None = None) -> h2.events.PingAckReceived:
        """PING, and the PING ACK that answers it."""
        self.conn.ping(opaque)
        self.flush()

        def acks() -> list[h2.events.PingAckReceived]:
            return [e for e in self.events if isinstance(e, h2.events.PingAckReceived)]

        self.read_until(lambda: bool(acks()), timeout)
        return acks()[0]


def header_dict(headers: object) -> dict[str, str]:
    """h2's header list (str pairs, as the client decodes them) as a dict."""
    assert isinstance(headers, list)
    return {str(name): str(value) for name, value in headers}
