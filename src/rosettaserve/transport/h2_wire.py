"""HTTP/2's wire vocabulary (RFC 9113) as the server's connections (``h2``) speak it: frame types,
flags, error codes and settings, what this server advertises (its preface), the errors a frame
can raise, and the checks of a frame that need no connection state.
"""

from __future__ import annotations

import struct

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
DATA, HEADERS, PRIORITY, RST_STREAM, SETTINGS, PUSH_PROMISE, PING, GOAWAY = range(8)
WINDOW_UPDATE, CONTINUATION = 8, 9
END_STREAM = ACK = 0x1
END_HEADERS, PADDED, PRIORITY_FLAG = 0x4, 0x8, 0x20
# error codes
NO_ERROR, PROTOCOL_ERROR, INTERNAL_ERROR, FLOW_CONTROL_ERROR = 0, 1, 2, 3
STREAM_CLOSED, FRAME_SIZE_ERROR, REFUSED_STREAM, CANCEL = 5, 6, 7, 8
COMPRESSION_ERROR, ENHANCE_YOUR_CALM = 9, 11
# settings
HEADER_TABLE_SIZE, ENABLE_PUSH, MAX_CONCURRENT_STREAMS, INITIAL_WINDOW_SIZE = 1, 2, 3, 4
MAX_FRAME_SIZE, MAX_HEADER_LIST_SIZE = 5, 6

DEFAULT_WINDOW = 65535
DEFAULT_FRAME = 16384
MAX_WINDOW = (1 << 31) - 1
# what this server advertises
STREAM_WINDOW = 16 << 20  # a 1 MiB request never waits for a window update
CONNECTION_WINDOW = 64 << 20
FRAME_LIMIT = 1 << 20
HEADER_LIST_LIMIT = 64 * 1024
CONCURRENT_STREAMS = 1024

FRAME_HEAD = struct.Struct(">BHBBL")  # length as a byte and a short, type, flags, stream id
U32 = struct.Struct(">L")
SETTING = struct.Struct(">HL")


class ConnectionFailure(Exception):
    """Ends the connection with a GOAWAY carrying ``code``."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


class StreamError(Exception):
    """Ends one stream with a RST_STREAM carrying ``code``."""

    def __init__(self, stream_id: int, code: int, message: str) -> None:
        super().__init__(message)
        self.stream_id, self.code = stream_id, code


def frame(kind: int, flags: int, stream_id: int, length: int) -> bytes:
    """A frame's 9-byte header."""
    return FRAME_HEAD.pack(length >> 16, length & 0xFFFF, kind, flags, stream_id)


def server_preface() -> bytes:
    """SETTINGS with what this server advertises, and the connection's window opened."""
    settings = b"".join(
        SETTING.pack(key, value)
        for key, value in (
            (MAX_CONCURRENT_STREAMS, CONCURRENT_STREAMS),
            (INITIAL_WINDOW_SIZE, STREAM_WINDOW),
            (MAX_FRAME_SIZE, FRAME_LIMIT),
            (MAX_HEADER_LIST_SIZE, HEADER_LIST_LIMIT),
        )
    )
    increment = U32.pack(CONNECTION_WINDOW - DEFAULT_WINDOW)
    window = frame(WINDOW_UPDATE, 0, 0, 4) + increment
    return frame(SETTINGS, 0, 0, len(settings)) + settings + window


SERVER_PREFACE = server_preface()


def check_priority(stream_id: int, payload: bytes) -> None:
    """A PRIORITY frame: checked, then ignored (this server does not prioritize)."""
    if stream_id == 0:
        raise ConnectionFailure(PROTOCOL_ERROR, "PRIORITY on stream 0")
    if len(payload) != 5:
        raise StreamError(stream_id, FRAME_SIZE_ERROR, "a PRIORITY frame must carry 5 bytes")
    if U32.unpack_from(payload)[0] & 0x7FFFFFFF == stream_id:
        raise StreamError(stream_id, PROTOCOL_ERROR, "a stream cannot depend on itself")


def unpad(payload: bytes, stream_id: int) -> bytes:
    if not payload:
        raise ConnectionFailure(PROTOCOL_ERROR, "a padded frame without its pad length")
    pad = payload[0]
    if pad >= len(payload):
        raise ConnectionFailure(PROTOCOL_ERROR, f"padding longer than the frame on {stream_id}")
    return payload[1 : len(payload) - pad]
