"""HTTP/2's wire vocabulary (RFC 9113) as the server's connections (``h2``) speak it: frame types,
flags, error codes and settings, what this server advertises (its preface), the errors a frame
can raise, and the checks of a frame that need no connection state.
"""

from __future__ import annotations

import struct
from typing import Final

# Final: compiled, these are constants or C statics here and where they are imported, not a
# lookup in a module's dict) [cost: final-static]
PREFACE: Final = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
# frame types
DATA: Final = 0
HEADERS: Final = 1
PRIORITY: Final = 2
RST_STREAM: Final = 3
SETTINGS: Final = 4
PUSH_PROMISE: Final = 5
PING: Final = 6
GOAWAY: Final = 7
WINDOW_UPDATE: Final = 8
CONTINUATION: Final = 9
# flags
END_STREAM: Final = 0x1
ACK: Final = 0x1
END_HEADERS: Final = 0x4
PADDED: Final = 0x8
PRIORITY_FLAG: Final = 0x20
# error codes
NO_ERROR: Final = 0
PROTOCOL_ERROR: Final = 1
INTERNAL_ERROR: Final = 2
FLOW_CONTROL_ERROR: Final = 3
STREAM_CLOSED: Final = 5
FRAME_SIZE_ERROR: Final = 6
REFUSED_STREAM: Final = 7
CANCEL: Final = 8
COMPRESSION_ERROR: Final = 9
ENHANCE_YOUR_CALM: Final = 11
# settings
HEADER_TABLE_SIZE: Final = 1
ENABLE_PUSH: Final = 2
MAX_CONCURRENT_STREAMS: Final = 3
INITIAL_WINDOW_SIZE: Final = 4
MAX_FRAME_SIZE: Final = 5
MAX_HEADER_LIST_SIZE: Final = 6

DEFAULT_WINDOW: Final = 65535
DEFAULT_FRAME: Final = 16384
MAX_WINDOW: Final = (1 << 31) - 1
# what this server advertises
STREAM_WINDOW: Final = 16 << 20  # a 1 MiB request never waits for a window update
CONNECTION_WINDOW: Final = 64 << 20
FRAME_LIMIT: Final = 1 << 20
HEADER_LIST_LIMIT: Final = 64 * 1024
CONCURRENT_STREAMS: Final = 1024

U32: Final = struct.Struct(">L")
SETTING: Final = struct.Struct(">HL")


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
    """A frame's 9-byte header: length (3 bytes) and type, then flags and stream id (4 bytes).
    Two native ints' to_bytes, not a struct's pack [cost: frame-header]."""
    return (length << 8 | kind).to_bytes(4, "big") + (flags << 32 | stream_id).to_bytes(5, "big")


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


SERVER_PREFACE: Final = server_preface()


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
