"""HPACK (``transport/hpack.py``): the decoder of one connection fed a sequence of header blocks.

The input is the blocks one after another, each after its length (2 bytes, big-endian; a last
block shorter than its length is what is left). Properties: only HpackError escapes the
decoder; where it decodes a block, python-hyper's decoder (the reference, fed the same blocks)
either refuses it too or decodes the same header list; once a block fails, the connection is
over (as in the server: a COMPRESSION_ERROR).
"""

from __future__ import annotations

import hpack

from rosettaserve.transport.hpack import Decoder, HpackError

LIMIT = 65536


def blocks(data: bytes) -> list[bytes]:
    out = []
    pos = 0
    while pos < len(data):
        length = int.from_bytes(data[pos : pos + 2], "big")
        out.append(data[pos + 2 : pos + 2 + length])
        pos += 2 + length
    return out


def frame_blocks(parts: list[bytes]) -> bytes:
    """The input that ``blocks`` reads back as ``parts``."""
    return b"".join(len(p).to_bytes(2, "big") + p for p in parts)


def check(data: bytes) -> None:
    ours = Decoder(max_header_list_size=LIMIT)
    reference = hpack.Decoder(max_header_list_size=LIMIT)
    reference_ok = True
    for block in blocks(data):
        try:
            decoded = ours.decode(block)
        except HpackError:
            return
        assert all(type(n) is str and type(v) is str for n, v in decoded), decoded
        if not reference_ok:
            continue
        try:
            expected = reference.decode(block, raw=True)
        except hpack.HPACKError:
            reference_ok = False  # its table is no longer ours: compare no further
            continue
        got = [(n.encode("latin-1"), v.encode("latin-1")) for n, v in decoded]
        assert got == [(bytes(n), bytes(v)) for n, v in expected], (got, expected)
