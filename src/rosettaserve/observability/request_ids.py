"""Request ids: the one a client sends (``X-Request-ID``, gRPC ``x-request-id``), or one made
here; held in a context variable for the request's log lines (``logging_setup``'s filter).
The header's name and the variable are the transports' too: web/request_id.py.

A made id is this process's random prefix and a counter, in hex: unique across the server's
processes and restarts for any practical purpose, and a string join rather than a uuid4 per
request.
"""

from __future__ import annotations

import itertools
import os

from rosettaserve.web.request_id import HEADER, REQUEST_ID

__all__ = ["HEADER", "MAX_LENGTH", "REQUEST_ID", "accepted", "new_id"]  # (two of them: web's)

MAX_LENGTH = 128  # a longer id is replaced, as is one with an unprintable character

_PREFIX = os.urandom(6).hex() + "-"
_COUNTER = itertools.count(1)


def new_id() -> str:
    return _PREFIX + format(next(_COUNTER), "x")


def accepted(value: str | None) -> str:
    """The client's id when it is fit for a log line and a header (printable ASCII, spaces
    aside, at most ``MAX_LENGTH`` characters), else a new one."""
    if (
        value
        and len(value) <= MAX_LENGTH
        and value.isascii()
        and value.isprintable()
        and " " not in value
    ):
        return value
    return new_id()
