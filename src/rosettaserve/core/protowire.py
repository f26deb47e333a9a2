"""Reading protobuf's wire format by hand: the pieces the protocols' own readers of their hot
messages are made of (OIP's ModelInfer, TF Serving's Predict). A reader raises ``Unexpected``
for anything it leaves to protobuf (a truncated or overlong value, a string that is not UTF-8,
a field it does not take), and its caller parses the bytes with protobuf instead, which accepts
or rejects them as it always has."""

from __future__ import annotations

from typing import Final

# Final: compiled, these are constants or C statics, not a lookup in the module's dict
VARINT: Final = 0  # wire types
FIXED64: Final = 1
LENGTH: Final = 2
FIXED32: Final = 5
_U64: Final = 1 << 64
_SHORT: Final = (1 << 62) - 1  # at most this, an int is native in compiled code: compared cheaply


class Unexpected(Exception):
    """Inside a reader: something protobuf should judge."""


def length_field(data: bytes, at: int, end: int) -> tuple[int, int, int]:
    """A length-delimited field: (field number, start of its payload, end of its payload)."""
    key, at = varint(data, at, end)
    if key & 7 != LENGTH:
        raise Unexpected
    start, stop = span(data, at, end)
    return key >> 3, start, stop


def span(data: bytes, at: int, end: int) -> tuple[int, int]:
    length, at = varint(data, at, end)
    if length > end - at:
        raise Unexpected
    return at, at + length


def varint(data: bytes, at: int, end: int) -> tuple[int, int]:
    if at < end and data[at] < 0x80:  # one byte: tags, lengths, small numbers
        return data[at], at + 1
    value = 0
    shift = 0
    while at < end and shift < 64:
        byte = data[at]
        at += 1
        if shift == 63 and byte > 1:  # the tenth byte carries bit 63 only
            raise Unexpected
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, at
        shift += 7
    raise Unexpected


def signed64(value: int) -> int:
    if value <= _SHORT:
        return value
    return value - _U64 if value >= 1 << 63 else value


def text(data: bytes, start: int, stop: int) -> str:
    try:
        return data[start:stop].decode()
    except UnicodeDecodeError:
        raise Unexpected from None
