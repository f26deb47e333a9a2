"""HPACK (RFC 7541): the header compression of the HTTP/2 gRPC server.

``Decoder`` reads the header blocks of one connection: it keeps that connection's dynamic table
(RFC 7541 section 4) and fails with ``HpackError``, the connection's COMPRESSION_ERROR, on a block
it cannot decode or that exceeds its limits. It bounds what a block may make it allocate: a
string's declared length is checked against the rest of the block and against what remains of
the header list's size limit before the string is copied or decoded.

``encode`` is stateless: a field of the static table is sent indexed, anything else as a literal
*without indexing* (its name indexed when the static table has it), and strings are not
Huffman-coded. It never adds to the peer's dynamic table, so the peer's SETTINGS_HEADER_TABLE_SIZE
never matters and no table size update is ever due. Response headers and trailers are a few short
fields; indexing them would save a few octets per response, not worth a table to keep in step.

Names and values are ``str`` decoded from latin-1: one octet, one character.

A field HPACK can carry but HTTP/2 does not allow (RFC 9113 8.2.1: a name with an uppercase letter,
a space, a colon past its first character or a non-ASCII octet; a value with NUL, CR or LF, or
that starts or ends with a space or tab) makes the request malformed, a stream error, not a
decoding error: the block is decoded all the same (the dynamic table must stay in step with the
peer's) and ``Decoder.malformed`` says why. The check costs nothing on a warm connection: it is
made on the literals the block carries; a field taken from the dynamic table was checked when it
was inserted, and is checked again only while the table holds a field that failed.

The module is compiled with mypyc (scripts/compile_native.py). The common block is a gRPC
client's request on a warm connection: a handful of fields, nearly all indexed, whose fields
come back as the very tuples the tables hold.
"""

from __future__ import annotations

import re
from typing import Final, cast


class HpackError(Exception):
    """A header block that cannot be decoded (the connection's COMPRESSION_ERROR)."""


# A header field, as the tables hold it. Not ``tuple[str, str]``: mypyc unboxes a fixed-length
# tuple into a C struct, so each field read from a table would be boxed again, a new tuple per
# field of every block; a ``tuple[str, ...]`` stays the tuple the table holds.
_Field = tuple[str, ...]

_ENTRY_OVERHEAD: Final = 32  # RFC 7541 section 4.1: an entry's size is its octets plus 32
_MAX_INTEGER: Final = 1 << 32
_STATIC_COUNT: Final = 61

# RFC 7541 Appendix A. Index 0 is never valid: a placeholder, so that an index needs no offset.
_STATIC_TABLE: Final[tuple[_Field, ...]] = (
    ("", ""),
    (":authority", ""),  # 1
    (":method", "GET"),  # 2
    (":method", "POST"),  # 3
    (":path", "/"),  # 4
    (":path", "/index.html"),  # 5
    (":scheme", "http"),  # 6
    (":scheme", "https"),  # 7
    (":status", "200"),  # 8
    (":status", "204"),  # 9
    (":status", "206"),  # 10
    (":status", "304"),  # 11
    (":status", "400"),  # 12
    (":status", "404"),  # 13
    (":status", "500"),  # 14
    ("accept-charset", ""),  # 15
    ("accept-encoding", "gzip, deflate"),  # 16
    ("accept-language", ""),  # 17
    ("accept-ranges", ""),  # 18
    ("accept", ""),  # 19
    ("access-control-allow-origin", ""),  # 20
    ("age", ""),  # 21
    ("allow", ""),  # 22
    ("authorization", ""),  # 23
    ("cache-control", ""),  # 24
    ("content-disposition", ""),  # 25
    ("content-encoding", ""),  # 26
    ("content-language", ""),  # 27
    ("content-length", ""),  # 28
    ("content-location", ""),  # 29
    ("content-range", ""),  # 30
    ("content-type", ""),  # 31
    ("cookie", ""),  # 32
    ("date", ""),  # 33
    ("etag", ""),  # 34
    ("expect", ""),  # 35
    ("expires", ""),  # 36
    ("from", ""),  # 37
    ("host", ""),  # 38
    ("if-match", ""),  # 39
    ("if-modified-since", ""),  # 40
    ("if-none-match", ""),  # 41
    ("if-range", ""),  # 42
    ("if-unmodified-since", ""),  # 43
    ("last-modified", ""),  # 44
    ("link", ""),  # 45
    ("location", ""),  # 46
    ("max-forwards", ""),  # 47
    ("proxy-authenticate", ""),  # 48
    ("proxy-authorization", ""),  # 49
    ("range", ""),  # 50
    ("referer", ""),  # 51
    ("refresh", ""),  # 52
    ("retry-after", ""),  # 53
    ("server", ""),  # 54
    ("set-cookie", ""),  # 55
    ("strict-transport-security", ""),  # 56
    ("transfer-encoding", ""),  # 57
    ("user-agent", ""),  # 58
    ("vary", ""),  # 59
    ("via", ""),  # 60
    ("www-authenticate", ""),  # 61
)

# RFC 7541 Appendix B: (code, length in bits) of each symbol, 0-255 and EOS (256).
# fmt: off
_HUFFMAN_CODES: Final[tuple[tuple[int, int], ...]] = (
    (0x1FF8, 13), (0x7FFFD8, 23), (0xFFFFFE2, 28), (0xFFFFFE3, 28),  # 0
    (0xFFFFFE4, 28), (0xFFFFFE5, 28), (0xFFFFFE6, 28), (0xFFFFFE7, 28),  # 4
    (0xFFFFFE8, 28), (0xFFFFEA, 24), (0x3FFFFFFC, 30), (0xFFFFFE9, 28),  # 8
    (0xFFFFFEA, 28), (0x3FFFFFFD, 30), (0xFFFFFEB, 28), (0xFFFFFEC, 28),  # 12
    (0xFFFFFED, 28), (0xFFFFFEE, 28), (0xFFFFFEF, 28), (0xFFFFFF0, 28),  # 16
    (0xFFFFFF1, 28), (0xFFFFFF2, 28), (0x3FFFFFFE, 30), (0xFFFFFF3, 28),  # 20
    (0xFFFFFF4, 28), (0xFFFFFF5, 28), (0xFFFFFF6, 28), (0xFFFFFF7, 28),  # 24
    (0xFFFFFF8, 28), (0xFFFFFF9, 28), (0xFFFFFFA, 28), (0xFFFFFFB, 28),  # 28
    (0x14, 6), (0x3F8, 10), (0x3F9, 10), (0xFFA, 12),  # 32
    (0x1FF9, 13), (0x15, 6), (0xF8, 8), (0x7FA, 11),  # 36
    (0x3FA, 10), (0x3FB, 10), (0xF9, 8), (0x7FB, 11),  # 40
    (0xFA, 8), (0x16, 6), (0x17, 6), (0x18, 6),  # 44
    (0x0, 5), (0x1, 5), (0x2, 5), (0x19, 6),  # 48
    (0x1A, 6), (0x1B, 6), (0x1C, 6), (0x1D, 6),  # 52
    (0x1E, 6), (0x1F, 6), (0x5C, 7), (0xFB, 8),  # 56
    (0x7FFC, 15), (0x20, 6), (0xFFB, 12), (0x3FC, 10),  # 60
    (0x1FFA, 13), (0x21, 6), (0x5D, 7), (0x5E, 7),  # 64
    (0x5F, 7), (0x60, 7), (0x61, 7), (0x62, 7),  # 68
    (0x63, 7), (0x64, 7), (0x65, 7), (0x66, 7),  # 72
    (0x67, 7), (0x68, 7), (0x69, 7), (0x6A, 7),  # 76
    (0x6B, 7), (0x6C, 7), (0x6D, 7), (0x6E, 7),  # 80
    (0x6F, 7), (0x70, 7), (0x71, 7), (0x72, 7),  # 84
    (0xFC, 8), (0x73, 7), (0xFD, 8), (0x1FFB, 13),  # 88
    (0x7FFF0, 19), (0x1FFC, 13), (0x3FFC, 14), (0x22, 6),  # 92
    (0x7FFD, 15), (0x3, 5), (0x23, 6), (0x4, 5),  # 96
    (0x24, 6), (0x5, 5), (0x25, 6), (0x26, 6),  # 100
    (0x27, 6), (0x6, 5), (0x74, 7), (0x75, 7),  # 104
    (0x28, 6), (0x29, 6), (0x2A, 6), (0x7, 5),  # 108
    (0x2B, 6), (0x76, 7), (0x2C, 6), (0x8, 5),  # 112
    (0x9, 5), (0x2D, 6), (0x77, 7), (0x78, 7),  # 116
    (0x79, 7), (0x7A, 7), (0x7B, 7), (0x7FFE, 15),  # 120
    (0x7FC, 11), (0x3FFD, 14), (0x1FFD, 13), (0xFFFFFFC, 28),  # 124
    (0xFFFE6, 20), (0x3FFFD2, 22), (0xFFFE7, 20), (0xFFFE8, 20),  # 128
    (0x3FFFD3, 22), (0x3FFFD4, 22), (0x3FFFD5, 22), (0x7FFFD9, 23),  # 132
    (0x3FFFD6, 22), (0x7FFFDA, 23), (0x7FFFDB, 23), (0x7FFFDC, 23),  # 136
    (0x7FFFDD, 23), (0x7FFFDE, 23), (0xFFFFEB, 24), (0x7FFFDF, 23),  # 140
    (0xFFFFEC, 24), (0xFFFFED, 24), (0x3FFFD7, 22), (0x7FFFE0, 23),  # 144
    (0xFFFFEE, 24), (0x7FFFE1, 23), (0x7FFFE2, 23), (0x7FFFE3, 23),  # 148
    (0x7FFFE4, 23), (0x1FFFDC, 21), (0x3FFFD8, 22), (0x7FFFE5, 23),  # 152
    (0x3FFFD9, 22), (0x7FFFE6, 23), (0x7FFFE7, 23), (0xFFFFEF, 24),  # 156
    (0x3FFFDA, 22), (0x1FFFDD, 21), (0xFFFE9, 20), (0x3FFFDB, 22),  # 160
    (0x3FFFDC, 22), (0x7FFFE8, 23), (0x7FFFE9, 23), (0x1FFFDE, 21),  # 164
    (0x7FFFEA, 23), (0x3FFFDD, 22), (0x3FFFDE, 22), (0xFFFFF0, 24),  # 168
    (0x1FFFDF, 21), (0x3FFFDF, 22), (0x7FFFEB, 23), (0x7FFFEC, 23),  # 172
    (0x1FFFE0, 21), (0x1FFFE1, 21), (0x3FFFE0, 22), (0x1FFFE2, 21),  # 176
    (0x7FFFED, 23), (0x3FFFE1, 22), (0x7FFFEE, 23), (0x7FFFEF, 23),  # 180
    (0xFFFEA, 20), (0x3FFFE2, 22), (0x3FFFE3, 22), (0x3FFFE4, 22),  # 184
    (0x7FFFF0, 23), (0x3FFFE5, 22), (0x3FFFE6, 22), (0x7FFFF1, 23),  # 188
    (0x3FFFFE0, 26), (0x3FFFFE1, 26), (0xFFFEB, 20), (0x7FFF1, 19),  # 192
    (0x3FFFE7, 22), (0x7FFFF2, 23), (0x3FFFE8, 22), (0x1FFFFEC, 25),  # 196
    (0x3FFFFE2, 26), (0x3FFFFE3, 26), (0x3FFFFE4, 26), (0x7FFFFDE, 27),  # 200
    (0x7FFFFDF, 27), (0x3FFFFE5, 26), (0xFFFFF1, 24), (0x1FFFFED, 25),  # 204
    (0x7FFF2, 19), (0x1FFFE3, 21), (0x3FFFFE6, 26), (0x7FFFFE0, 27),  # 208
    (0x7FFFFE1, 27), (0x3FFFFE7, 26), (0x7FFFFE2, 27), (0xFFFFF2, 24),  # 212
    (0x1FFFE4, 21), (0x1FFFE5, 21), (0x3FFFFE8, 26), (0x3FFFFE9, 26),  # 216
    (0xFFFFFFD, 28), (0x7FFFFE3, 27), (0x7FFFFE4, 27), (0x7FFFFE5, 27),  # 220
    (0xFFFEC, 20), (0xFFFFF3, 24), (0xFFFED, 20), (0x1FFFE6, 21),  # 224
    (0x3FFFE9, 22), (0x1FFFE7, 21), (0x1FFFE8, 21), (0x7FFFF3, 23),  # 228
    (0x3FFFEA, 22), (0x3FFFEB, 22), (0x1FFFFEE, 25), (0x1FFFFEF, 25),  # 232
    (0xFFFFF4, 24), (0xFFFFF5, 24), (0x3FFFFEA, 26), (0x7FFFF4, 23),  # 236
    (0x3FFFFEB, 26), (0x7FFFFE6, 27), (0x3FFFFEC, 26), (0x3FFFFED, 26),  # 240
    (0x7FFFFE7, 27), (0x7FFFFE8, 27), (0x7FFFFE9, 27), (0x7FFFFEA, 27),  # 244
    (0x7FFFFEB, 27), (0xFFFFFFE, 28), (0x7FFFFEC, 27), (0x7FFFFED, 27),  # 248
    (0x7FFFFEE, 27), (0x7FFFFEF, 27), (0x7FFFFF0, 27), (0x3FFFFEE, 26),  # 252
    (0x3FFFFFFF, 30),  # 256
)
# fmt: on
_EOS: Final = 256
_CHARS: Final[tuple[str, ...]] = tuple(chr(octet) for octet in range(256))
_OCTETS: Final[tuple[bytes, ...]] = tuple(bytes((octet,)) for octet in range(256))

# A step of the Huffman decoder: 4 input bits from a state (a node of the code tree), packed in
# one int: the next state, and the symbol it completed if it completed one (4 bits cannot hold
# two: the shortest code has 5).
_NEXT_STATE: Final = 0xFF
_EMIT: Final = 1 << 16  # a symbol, in bits 8-15, was completed
_ACCEPT: Final = 1 << 17  # a block may end here: the bits since the last symbol are 0-7 1s
_FAIL: Final = 1 << 18  # the bits spell EOS, which a string must not contain


def _huffman_tree() -> list[int]:
    """The code tree: the children of node ``n`` are at ``2n`` and ``2n + 1`` (bit 0, bit 1),
    each a node (> 0; the root, 0, is no one's child) or ``~symbol`` for a leaf."""
    children = [0, 0]
    for symbol, (code, length) in enumerate(_HUFFMAN_CODES):
        node = 0
        for shift in range(length - 1, 0, -1):
            slot = 2 * node + (code >> shift & 1)
            if children[slot] == 0:
                children[slot] = len(children) // 2
                children.extend((0, 0))
            node = children[slot]
        children[2 * node + (code & 1)] = ~symbol
    return children


def _huffman_steps() -> list[int]:
    """The decoder's table: the step from state ``s`` on the 4 bits ``b`` is at ``16s + b``."""
    children = _huffman_tree()
    padding = [0]  # the states of a valid end: the root, then up to 7 1s down from it
    for _ in range(7):
        padding.append(children[2 * padding[-1] + 1])
    steps: list[int] = []
    for state in range(len(children) // 2):
        for nibble in range(16):
            node = state
            step = 0
            for shift in (3, 2, 1, 0):
                child = children[2 * node + (nibble >> shift & 1)]
                if child >= 0:
                    node = child
                elif ~child == _EOS:
                    step = _FAIL
                    break
                else:
                    step = _EMIT | ~child << 8
                    node = 0
            if not step & _FAIL:
                step |= node | (_ACCEPT if node in padding else 0)
            steps.append(step)
    return steps


_HUFFMAN_STEPS: Final[list[int]] = _huffman_steps()


def _huffman_decode(block: bytes, start: int, end: int) -> str:
    chars: list[str] = []
    steps = _HUFFMAN_STEPS
    step = _ACCEPT  # an empty string is valid
    state = 0
    for position in range(start, end):
        octet = block[position]
        step = steps[state << 4 | octet >> 4]
        if step & _EMIT:
            chars.append(_CHARS[step >> 8 & 0xFF])
        elif step & _FAIL:
            raise HpackError("EOS symbol inside a Huffman-coded string")
        step = steps[(step & _NEXT_STATE) << 4 | octet & 0x0F]
        if step & _EMIT:
            chars.append(_CHARS[step >> 8 & 0xFF])
        elif step & _FAIL:
            raise HpackError("EOS symbol inside a Huffman-coded string")
        state = step & _NEXT_STATE
    if not step & _ACCEPT:
        raise HpackError("Huffman padding longer than 7 bits or not all 1s")
    return "".join(chars)


def _integer(block: bytes, pos: int, end: int, mask: int) -> tuple[int, int]:
    """The integer whose prefix is the bits ``mask`` of ``block[pos]`` (RFC 7541 section 5.1),
    and the position after it."""
    value = block[pos] & mask
    pos += 1
    if value < mask:
        return value, pos
    shift = 0
    while pos < end:
        octet = block[pos]
        pos += 1
        value += (octet & 0x7F) << shift
        if value > _MAX_INTEGER:
            raise HpackError("integer above 2**32")
        if octet < 0x80:
            return value, pos
        shift += 7
        if shift > 28:  # 5 octets carry any integer up to 2**32
            raise HpackError("integer encoded in too many octets")
    raise HpackError("header block truncated inside an integer")


def _string(block: bytes, pos: int, end: int, budget: int) -> tuple[str, int]:
    """The string literal at ``pos`` (RFC 7541 section 5.2) and the position after it. One that
    cannot fit in ``budget`` octets (what the header list's limit leaves) fails before it is
    copied or decoded; the caller checks the field's size once it is decoded."""
    if pos >= end:
        raise HpackError("header block truncated before a string")
    huffman = block[pos] & 0x80
    length, pos = _integer(block, pos, end, 0x7F)
    # the fewest characters it can decode to: a Huffman code is at most 30 bits a symbol
    least = (length * 8 - 7) // 30 if huffman else length
    if least > budget:
        raise HpackError("header list larger than its limit")
    if length > end - pos:
        raise HpackError("header block truncated inside a string")
    if huffman:
        text = _huffman_decode(block, pos, pos + length)  # at most 8/5 octets an octet
    else:
        text = block[pos : pos + length].decode("latin-1")
    return text, pos + length


# RFC 9113 8.2.1: what a field name (besides a colon after its first character) and a field
# value must not contain
_BAD_NAME_CHARS: Final = re.compile(r"[^\x21-\x40\x5b-\x7e]")
_BAD_VALUE: Final = re.compile(r"[\x00\n\r]|\A[ \t]|[ \t]\Z")


def name_fault(name: str) -> str:
    """Why ``name`` cannot be a field name in HTTP/2 ('' if it can)."""
    if not name:
        return "an empty field name"
    if _BAD_NAME_CHARS.search(name) is not None or name.find(":", 1) >= 0:
        return f"field name {name[:64]!r} has a character HTTP/2 does not allow"
    return ""


def value_fault(name: str, value: str) -> str:
    """Why ``value`` cannot be a field value in HTTP/2 ('' if it can)."""
    if not value or (value.isprintable() and value[0] != " " and value[-1] != " "):
        return ""  # the common value, without the regular expression
    if _BAD_VALUE.search(value) is not None:
        return f"the value of {name} has NUL, CR, LF or surrounding white space"
    return ""


def _field_fault(field: _Field) -> str:
    return name_fault(field[0]) or value_fault(field[0], field[1])


def _entry_size(field: _Field) -> int:
    return len(field[0]) + len(field[1]) + _ENTRY_OVERHEAD


class Decoder:
    """The decoding side of one connection: its dynamic table, and the limits it advertised
    (SETTINGS_HEADER_TABLE_SIZE, SETTINGS_MAX_HEADER_LIST_SIZE)."""

    def __init__(self, max_table_size: int = 4096, max_header_list_size: int = 65536) -> None:
        self.max_table_size = max_table_size
        self.max_header_list_size = max_header_list_size
        self._entries: list[_Field] = []  # oldest first: index 62 is the last one
        self._size = 0  # of the entries, in octets
        self._capacity = max_table_size  # the size the encoder last set, up to max_table_size
        self._tainted = 0  # entries of the dynamic table that HTTP/2 does not allow as fields
        self.malformed = ""  # why the last block decoded is not a valid HTTP/2 field section

    def decode(self, block: bytes) -> list[tuple[str, str]]:
        """The header list of one complete header block (HEADERS and its CONTINUATIONs)."""
        end = len(block)
        pos = 0
        self.malformed = ""
        while pos < end and block[pos] & 0xE0 == 0x20:
            pos = self._resize(block, pos, end)
        headers: list[_Field] = []  # each a (name, value) pair
        budget = self.max_header_list_size
        while pos < end:
            octet = block[pos]
            if octet & 0x80:  # indexed field
                if octet != 0xFF:
                    index = octet & 0x7F
                    pos += 1
                else:
                    index, pos = _integer(block, pos, end, 0x7F)
                field = self._field(index)
                if self._tainted and index > _STATIC_COUNT and not self.malformed:
                    self.malformed = _field_fault(field)
            elif octet & 0x40:  # literal with incremental indexing
                field, pos = self._literal(block, pos, end, 0x3F, budget)
                self._insert(field, self.malformed)
            elif octet & 0x20:
                raise HpackError("dynamic table size update after the first header field")
            else:  # literal without indexing (0000) or never indexed (0001)
                field, pos = self._literal(block, pos, end, 0x0F, budget)
            budget -= _entry_size(field)
            if budget < 0:
                raise HpackError(f"header list larger than {self.max_header_list_size} octets")
            headers.append(field)
        return cast(list[tuple[str, str]], headers)

    def _field(self, index: int) -> _Field:
        if 0 < index <= _STATIC_COUNT:
            return _STATIC_TABLE[index]
        entries = self._entries
        position = len(entries) + _STATIC_COUNT - index
        if index == 0 or position < 0:
            raise HpackError(f"index {index} is not in the static or dynamic table")
        return entries[position]

    def _literal(
        self, block: bytes, pos: int, end: int, mask: int, budget: int
    ) -> tuple[_Field, int]:
        index, pos = _integer(block, pos, end, mask)
        budget -= _ENTRY_OVERHEAD
        if index:
            name = self._field(index)[0]
            fault = name_fault(name) if self._tainted and index > _STATIC_COUNT else ""
        else:
            name, pos = _string(block, pos, end, budget)
            fault = name_fault(name)
        value, pos = _string(block, pos, end, budget - len(name))
        if not fault:
            fault = value_fault(name, value)
        if fault and not self.malformed:
            self.malformed = fault
        return (name, value), pos

    def _insert(self, field: _Field, fault: str) -> None:
        # an entry larger than the table evicts every entry, then itself (RFC 7541 section 4.4)
        self._size += _entry_size(field)
        self._entries.append(field)
        if fault and _field_fault(field):
            self._tainted += 1
        self._evict()

    def _resize(self, block: bytes, pos: int, end: int) -> int:
        capacity, pos = _integer(block, pos, end, 0x1F)
        if capacity > self.max_table_size:
            raise HpackError(
                f"dynamic table size update to {capacity}, above {self.max_table_size}"
            )
        self._capacity = capacity
        self._evict()
        return pos

    def _evict(self) -> None:
        entries = self._entries
        size = self._size
        oldest = 0
        while size > self._capacity:
            size -= _entry_size(entries[oldest])
            oldest += 1
        if oldest:
            if self._tainted:
                self._tainted -= sum(1 for entry in entries[:oldest] if _field_fault(entry))
            del entries[:oldest]
            self._size = size


def _static_index() -> dict[str, tuple[bytes, dict[str, bytes]]]:
    """Name -> (the prefix of a literal without indexing with that indexed name,
    value -> the indexed field)."""
    index: dict[str, tuple[bytes, dict[str, bytes]]] = {}
    for position in range(_STATIC_COUNT, 0, -1):  # backwards: the lowest index of a name wins
        name, value = _STATIC_TABLE[position]
        fields = index[name][1] if name in index else {}
        fields[value] = _OCTETS[0x80 | position]
        index[name] = (_integer_bytes(position, 0x0F), fields)
    return index


def _integer_bytes(value: int, mask: int) -> bytes:
    """``value`` with a prefix of the bits ``mask``, the rest of its first octet 0."""
    if value < mask:
        return _OCTETS[value]
    out = bytearray((mask,))
    value -= mask
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


_STATIC_INDEX: Final[dict[str, tuple[bytes, dict[str, bytes]]]] = _static_index()
_LITERAL_NAME: Final = b"\x00"  # literal without indexing, with a literal name


def encode(headers: list[tuple[str, str]]) -> bytes:
    """The header block of ``headers``: static-table fields indexed, the others literals
    without indexing; nothing is added to the peer's dynamic table."""
    parts: list[bytes] = []
    for name, value in headers:
        known = _STATIC_INDEX.get(name)
        if known is None:
            parts.append(_LITERAL_NAME)
            _append_string(parts, name)
        else:
            indexed = known[1].get(value)
            if indexed is not None:
                parts.append(indexed)
                continue
            parts.append(known[0])
        _append_string(parts, value)
    return b"".join(parts)


def _append_string(parts: list[bytes], text: str) -> None:
    data = text.encode("latin-1")
    parts.append(_integer_bytes(len(data), 0x7F))
    parts.append(data)
