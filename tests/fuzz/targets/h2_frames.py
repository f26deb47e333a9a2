"""The HTTP/2 connection (``transport/h2.py``, with ``hpack.py`` and the gRPC layer above it,
``transport/grpc.py``) fed the client preface and arbitrary frames, answering with the server's
real gRPC services and models.

Properties: nothing escapes the protocol's methods; what it writes is whole, well-formed frames
(python-hyper's hyperframe parses each one, its header blocks decode with python-hyper's hpack)
after its SETTINGS, none larger than the client allowed; no GOAWAY says INTERNAL_ERROR and the
server logs no error (an exception it did not expect: gRPC's INTERNAL is also its answer to a
malformed call, as grpc-go's); and a valid call on a new connection afterwards succeeds. The
requests the bytes leave unfinished are then late (``h2_stalls.late_requests``, as the sweep
finds them long after): what cutting them writes holds to the same properties.
"""

from __future__ import annotations

import struct
from typing import Any

import h2.config
import h2.connection
import h2.events
import hpack
import hyperframe.frame as hf

from tests.fuzz.fakes import Harness, RecordingTransport, deliver, pieces, settle

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
INTERNAL_ERROR = 2
SETTINGS, MAX_FRAME_SIZE, DEFAULT_MAX_FRAME = 4, 5, 16384
HEALTH = "/grpc.health.v1.Health/Check"
LOOK, LATE_BY_S = 1e6, 1e9  # the sweep's looks at the requests left unfinished (its clock)


def frames(data: bytes) -> list[hf.Frame]:
    """The frames in ``data``, which must hold whole frames only."""
    out = []
    view = memoryview(data)
    while view:
        assert len(view) >= 9, f"a partial frame header at the end: {bytes(view)!r}"
        frame, length = hf.Frame.parse_frame_header(view[:9], strict=True)
        assert len(view) >= 9 + length, "a frame cut short"
        frame.parse_body(view[9 : 9 + length])
        out.append(frame)
        view = view[9 + length :]
    return out


def header_blocks(written: list[hf.Frame]) -> list[tuple[int, list[tuple[bytes, bytes]]]]:
    """Each header block the server sent: its stream and its fields, checking the framing."""
    decoder = hpack.Decoder()
    blocks = []
    pending: tuple[int, bytes] | None = None
    for frame in written:
        if pending is not None:
            assert isinstance(frame, hf.ContinuationFrame), "a header block interrupted"
            assert frame.stream_id == pending[0]
            pending = (pending[0], pending[1] + frame.data)
        elif isinstance(frame, hf.HeadersFrame):
            assert frame.stream_id != 0
            pending = (frame.stream_id, frame.data)
        else:
            assert not isinstance(frame, hf.ContinuationFrame), "a stray CONTINUATION"
            continue
        if "END_HEADERS" in frame.flags:
            fields = decoder.decode(pending[1], raw=True)
            blocks.append((pending[0], [(bytes(n), bytes(v)) for n, v in fields]))
            pending = None
    return blocks


def frame_lengths(data: bytes) -> list[tuple[int, int, int]]:
    """(type, flags, payload length) of each whole frame in ``data``, in order."""
    out = []
    pos = 0
    while len(data) - pos >= 9:
        length = int.from_bytes(data[pos : pos + 3], "big")
        out.append((data[pos + 3], data[pos + 4], length))
        pos += 9 + length
    return out


def largest_frame_allowed(sent: bytes) -> int:
    """The largest frame the client let the server send: SETTINGS_MAX_FRAME_SIZE, the largest
    value any of its SETTINGS named (16384 when none did)."""
    allowed = DEFAULT_MAX_FRAME
    pos = 0
    while len(sent) - pos >= 9:
        length = int.from_bytes(sent[pos : pos + 3], "big")
        if sent[pos + 3] == SETTINGS and not sent[pos + 4] & 1:
            payload = sent[pos + 9 : pos + 9 + length]
            for at in range(0, len(payload) - 5, 6):
                if int.from_bytes(payload[at : at + 2], "big") == MAX_FRAME_SIZE:
                    allowed = max(allowed, int.from_bytes(payload[at + 2 : at + 6], "big"))
        pos += 9 + length
    return allowed


def check_written(
    data: bytes, largest: int = DEFAULT_MAX_FRAME
) -> list[tuple[int, list[tuple[bytes, bytes]]]]:
    written = frames(data)
    for kind, _, length in frame_lengths(data):
        assert length <= largest, f"a frame of type {kind} of {length} bytes, above {largest}"
    assert written, "nothing written, not even SETTINGS"
    assert isinstance(written[0], hf.SettingsFrame), "no SETTINGS first"
    for frame in written:
        if isinstance(frame, hf.GoAwayFrame):
            assert frame.error_code != INTERNAL_ERROR, f"GOAWAY INTERNAL_ERROR: {frame}"
            assert frame.stream_id == 0
        if isinstance(frame, hf.DataFrame | hf.RstStreamFrame | hf.HeadersFrame):
            assert frame.stream_id != 0, f"{frame} on stream 0"
        if isinstance(frame, hf.SettingsFrame | hf.PingFrame):
            assert frame.stream_id == 0, f"{frame} on a stream"
    return header_blocks(written)


def health_call() -> bytes:
    """What a client sends for one Health/Check call."""
    client = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    client.initiate_connection()
    headers = [
        (":method", "POST"),
        (":scheme", "http"),
        (":path", HEALTH),
        (":authority", "fuzz"),
        ("content-type", "application/grpc"),
        ("te", "trailers"),
    ]
    client.send_headers(1, headers)
    client.send_data(1, b"\x00" + struct.pack(">I", 0), end_stream=True)
    return client.data_to_send()


HEALTH_CALL = health_call()


def _working(conn: Any) -> bool:
    """A stream whose request is all in (so an answer is on its way) is still open, and its
    answer is not held by the client's flow control (a window the client never opens keeps the
    answer waiting, as RFC 9113 §6.9 says it must)."""
    streams = getattr(conn, "streams", {})
    held = getattr(conn, "send_window", 1) <= 0
    return any(
        getattr(s, "remote_closed", True)
        and not (getattr(s, "pending", None) and (held or getattr(s, "send_window", 1) <= 0))
        for s in streams.values()
    )


async def _one_connection(reads: list[bytes], late: bool = False) -> bytes:
    """What the server writes for ``reads``; ``late``: then the sweep finds the requests left
    unfinished late (its first look starts their clocks, the next is long after)."""
    from rosettaserve.transport import h2 as server_h2
    from rosettaserve.transport.h2_stalls import late_requests

    harness = Harness.get()
    conn = server_h2.Connection(harness.grpc.h2)
    transport = RecordingTransport()
    conn.connection_made(transport)
    for read in reads:
        if transport.closed:
            break
        deliver(conn, read)
        await settle(lambda: _working(conn))
    if late and not transport.closed:
        for now in (LOOK, LOOK + LATE_BY_S):
            late_requests(conn, now, harness.grpc.h2.pace)
        await settle(lambda: _working(conn))
    conn.connection_lost(None)
    await settle(lambda: False)
    return bytes(transport.data)


def check(data: bytes) -> None:
    harness = Harness.get()
    written = harness.run(_one_connection(list(pieces(PREFACE + data)), late=True))
    check_written(written, largest_frame_allowed(data))
    blocks = check_written(harness.run(_one_connection([HEALTH_CALL])))
    statuses = [dict(fields).get(b"grpc-status") for _, fields in blocks]
    assert b"0" in statuses, f"a valid call afterwards ended {statuses}"
