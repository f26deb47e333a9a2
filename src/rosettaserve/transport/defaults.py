"""The transports' own limits and timeouts, as they stand when nothing sets them: the server's
settings and the command line start from these."""

from __future__ import annotations

DEFAULT_HEADER_TIMEOUT = 10.0  # seconds for a request head to arrive whole (HTTP/1.1)
DEFAULT_BODY_TIMEOUT = 30.0  # seconds a request body may go without a byte, and its first ones
DEFAULT_BODY_MIN_RATE = 500  # bytes a second a request body gains past its first seconds
DEFAULT_MAX_REQUEST_LINE = 16 * 1024  # bytes of request target (URL) (HTTP/1.1)
DEFAULT_MAX_HEADER_SIZE = 64 * 1024  # bytes of header fields together (HTTP/1.1)
DEFAULT_SEND_TIMEOUT = 30.0  # seconds an answer may wait on a client that takes none of it
