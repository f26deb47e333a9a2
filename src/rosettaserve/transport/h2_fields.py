"""The field sections of HTTP/2 requests: what makes one malformed (RFC 9113 8.1.1, 8.2, 8.3).

A malformed request is a stream error of type PROTOCOL_ERROR: the connection resets the stream
and goes on. The characters of field names and values are checked by the HPACK decoder, on the
literals it decodes (``hpack.Decoder.malformed``): the fields of a warm connection come from its
tables and were checked when they first arrived. What is checked here, once per header block, in
one pass over its fields, is the structure: the pseudo-header fields of a request (``:method``,
``:scheme``, ``:path`` once each and not empty, ``:authority`` at most once; no other, none after
a regular field), no connection-specific field (``connection``, ``keep-alive``,
``proxy-connection``, ``transfer-encoding``, ``upgrade``; ``te`` other than ``trailers``), a
``content-length`` that is a number (the DATA that follows must add up to it), a ``host`` that
agrees with ``:authority``. Trailers carry no pseudo-header field at all.

The module is compiled with mypyc (scripts/compile_native.py).
"""

from __future__ import annotations

from typing import Final, cast

# what a field's name says of it: a request's pseudo-header (a bit each), or a regular field this
# module looks at; any other name is 0. One dictionary lookup a field.
_METHOD: Final = 1
_SCHEME: Final = 2
_PATH: Final = 4
_AUTHORITY: Final = 8
_PSEUDO_BITS: Final = 15
_CONNECTION: Final = 16
_TE: Final = 32
_CONTENT_LENGTH: Final = 64
_HOST: Final = 128
_KIND: Final[dict[str, int]] = {
    ":method": _METHOD,
    ":scheme": _SCHEME,
    ":path": _PATH,
    ":authority": _AUTHORITY,
    "connection": _CONNECTION,
    "keep-alive": _CONNECTION,
    "proxy-connection": _CONNECTION,
    "transfer-encoding": _CONNECTION,
    "upgrade": _CONNECTION,
    "te": _TE,
    "content-length": _CONTENT_LENGTH,
    "host": _HOST,
}
_REQUIRED: Final = _METHOD | _SCHEME | _PATH
_NAMES: Final[dict[int, str]] = {_METHOD: ":method", _SCHEME: ":scheme", _PATH: ":path"}
_LENGTH_DIGITS: Final = 18  # a content-length of more digits is no body this server reads

NO_LENGTH: Final = -1  # no content-length field


def request_fault(headers: list[tuple[str, str]]) -> tuple[str, int]:
    """Why the header list of a request is malformed ('' if it is not), and its content-length
    (``NO_LENGTH`` when it has none)."""
    seen = 0
    regular = False
    method = authority = host = ""
    length = NO_LENGTH
    # the fields as the decoder's tables hold them: read, not unpacked into new tuples
    for field in cast(list[tuple[str, ...]], headers):
        name = field[0]
        kind = _KIND.get(name, 0)
        if not kind:
            if name.startswith(":"):
                return f"{name} is not a pseudo-header field of a request", length
            regular = True
            continue
        value = field[1]
        if kind <= _PSEUDO_BITS:
            if regular:
                return f"pseudo-header field {name} after a regular field", length
            if seen & kind:
                return f"{name} twice", length
            seen |= kind
            if kind == _AUTHORITY:
                authority = value
            elif not value:
                return f"an empty {name}", length
            elif kind == _METHOD:
                method = value
            continue
        regular = True
        if kind == _HOST:
            host = value
            continue
        fault, length = _special(kind, name, value, length)
        if fault:
            return fault, length
    if method == "CONNECT":  # RFC 9113 8.5: :authority alone (no extended CONNECT here)
        if seen != _METHOD | _AUTHORITY:
            return "a CONNECT request has :authority and no :scheme or :path", length
    elif seen & _REQUIRED != _REQUIRED:
        missing = [text for bit, text in _NAMES.items() if not seen & bit]
        return f"no {' '.join(missing)}", length
    if host and authority and host != authority:
        return f"host {host!r} is not :authority {authority!r}", length
    return "", length


def trailer_fault(headers: list[tuple[str, str]]) -> str:
    """Why the trailers of a request are malformed ('' if they are not)."""
    length = NO_LENGTH
    for name, value in headers:
        if name.startswith(":"):
            return f"pseudo-header field {name} in trailers"
        kind = _KIND.get(name, 0)
        if kind in (_CONNECTION, _TE):
            fault, length = _special(kind, name, value, length)
            if fault:
                return fault
    return ""


def _special(kind: int, name: str, value: str, length: int) -> tuple[str, int]:
    """A connection-specific field, ``te`` or ``content-length``: the fault, and the length."""
    if kind == _CONNECTION:
        return f"connection-specific field {name}", length
    if kind == _TE:
        if value != "trailers":
            return f"te: {value} (only te: trailers is allowed)", length
        return "", length
    if not value.isdigit() or not value.isascii() or len(value) > _LENGTH_DIGITS:
        return f"content-length {value!r} is not a number", length
    declared = int(value)
    if length not in (NO_LENGTH, declared):
        return "two different content-length values", length
    return "", declared
