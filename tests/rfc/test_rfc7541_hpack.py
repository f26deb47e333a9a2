"""RFC 7541 (HPACK), the decoder of a real server: the examples of Appendix C sent verbatim, the
dynamic table's size and eviction rules (sections 4, 6.3), integers (5.1), Huffman strings (5.2),
indexes (2.3.3, 6.1). Blocks are written here octet by octet, so each test controls the table the
server keeps; a decoding error is a connection error of type COMPRESSION_ERROR (RFC 9113 4.3).

Whether the server's table is exactly the RFC's is seen through HTTP/2 itself: a final request
refers to the dynamic entries by index, a pseudo-header field first, so that any other entry at
that index would make it malformed (RST_STREAM) or fail to decode (GOAWAY) instead of a reply.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.integration.h2client import hpack_int
from tests.rfc.h2_support import (
    COMPRESSION_ERROR,
    DATA,
    END_HEADERS,
    END_STREAM,
    HEADERS,
    INFER,
    PROTOCOL_ERROR,
    RST_STREAM,
    Frame,
    RawH2,
    h2_server,
    infer_message,
)
from tests.serverproc import ServerProcess


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    yield from h2_server(tmp_path_factory, "rfc7541")


# -- representations, by hand (no Huffman coding unless a test says so) -------------------------


def string(text: bytes) -> bytes:
    return hpack_int(len(text), 7) + text


def indexed(index: int) -> bytes:
    return hpack_int(index, 7, 0x80)


def incremental(name: bytes, value: bytes) -> bytes:
    """Literal with incremental indexing, new name (6.2.1): the table grows."""
    return b"\x40" + string(name) + string(value)


def plain(name: bytes, value: bytes) -> bytes:
    """Literal without indexing, new name (6.2.2): the table is left alone."""
    return b"\x00" + string(name) + string(value)


def size_update(size: int) -> bytes:
    return hpack_int(size, 5, 0x20)


PSEUDO = indexed(3) + indexed(6) + b"\x04" + string(INFER.encode())  # POST, http, :path
REGULAR = b"\x0f\x10" + string(b"application/grpc") + plain(b"te", b"trailers")  # content-type
REQUEST = PSEUDO + REGULAR


def call(c: RawH2, block: bytes) -> Frame:
    """A ModelInfer whose HEADERS carry ``block``: the frame that ended its stream."""
    stream_id = c.new_stream()
    c.frame(HEADERS, END_HEADERS, stream_id, block)
    c.frame(DATA, END_STREAM, stream_id, infer_message())
    return c.ended(stream_id)


def served(c: RawH2, block: bytes) -> None:
    end = call(c, block)
    assert end.kind != RST_STREAM, c.seen()
    assert c.grpc_status(end.stream_id) == "0", c.seen()


def decoding_error(c: RawH2, block: bytes) -> None:
    c.frame(HEADERS, END_HEADERS | END_STREAM, c.new_stream(), block)
    c.expect_goaway(COMPRESSION_ERROR)


# -- Appendix C -----------------------------------------------------------------------------------

C3 = [
    "8286 8441 0f77 7777 2e65 7861 6d70 6c65 2e63 6f6d",
    "8286 84be 5808 6e6f 2d63 6163 6865",
    "8287 85bf 400a 6375 7374 6f6d 2d6b 6579 0c63 7573 746f 6d2d 7661 6c75 65",
]
C4 = [
    "8286 8441 8cf1 e3c2 e5f2 3a6b a0ab 90f4 ff",
    "8286 84be 5886 a8eb 1064 9cbf",
    "8287 85bf 4088 25a8 49e9 5ba9 7d7f 8925 a849 e95b b8e8 b4bf",
]
C5 = [
    "4803 3330 3258 0770 7269 7661 7465 611d 4d6f 6e2c 2032 3120 4f63 7420 3230 3133"
    "2032 303a 3133 3a32 3120 474d 546e 1768 7474 7073 3a2f 2f77 7777 2e65 7861 6d70"
    "6c65 2e63 6f6d",
    "4803 3330 37c1 c0bf",
    "88c1 611d 4d6f 6e2c 2032 3120 4f63 7420 3230 3133 2032 303a 3133 3a32 3220 474d"
    "54c0 5a04 677a 6970 7738 666f 6f3d 4153 444a 4b48 514b 425a 584f 5157 454f 5049"
    "5541 5851 5745 4f49 553b 206d 6178 2d61 6765 3d33 3630 303b 2076 6572 7369 6f6e"
    "3d31",
]
C6 = [
    "4882 6402 5885 aec3 771a 4b61 96d0 7abe 9410 54d4 44a8 2005 9504 0b81 66e0 82a6"
    "2d1b ff6e 919d 29ad 1718 63c7 8f0b 97c8 e9ae 82ae 43d3",
    "4883 640e ffc1 c0bf",
    "88c1 6196 d07a be94 1054 d444 a820 0595 040b 8166 e084 a62d 1bff c05a 839b d9ab"
    "77ad 94e7 821d d7f2 e6c7 b335 dfdf cd5b 3960 d5af 2708 7f36 72c1 ab27 0fb5 291f"
    "9587 3160 65c0 03ed 4ee5 b106 3d50 07",
]


@pytest.mark.parametrize("blocks", [C3, C4], ids=["C.3", "C.4-huffman"])
def test_appendix_c_requests_leave_the_rfcs_table(c: RawH2, blocks: list[str]) -> None:
    """C.3 / C.4: three requests on one connection, decoded (each a well-formed GET, which gRPC
    answers 405); the table is then [62] custom-key, [63] cache-control, [64] :authority: a
    request that starts with index 64 and carries 62 and 63 is a well-formed gRPC call."""
    for block in blocks:
        stream_id = c.new_stream()
        c.frame(HEADERS, END_HEADERS | END_STREAM, stream_id, bytes.fromhex(block))
        c.ended(stream_id)
        assert c.http_status(stream_id) == "405", c.seen()
    served(c, indexed(64) + REQUEST + indexed(62) + indexed(63))


@pytest.mark.parametrize("blocks", [C5, C6], ids=["C.5", "C.6-huffman"])
def test_appendix_c_responses_evict_as_the_rfc_does(c: RawH2, blocks: list[str]) -> None:
    """C.5 / C.6, with the table set to 256 octets (a size update before the first block): the
    three blocks (response fields: as requests they are malformed, reset with PROTOCOL_ERROR,
    and decoded all the same) leave exactly [62] set-cookie, [63] content-encoding, [64] date."""
    for i, block in enumerate(blocks):
        stream_id = c.new_stream()
        prefix = size_update(256) if i == 0 else b""
        c.frame(HEADERS, END_HEADERS | END_STREAM, stream_id, prefix + bytes.fromhex(block))
        c.wait(lambda f, s=stream_id: f.kind == RST_STREAM and f.stream_id == s)
        assert c.resets(stream_id) == [PROTOCOL_ERROR]
    served(c, REQUEST + indexed(62) + indexed(63) + indexed(64))
    decoding_error(c, REQUEST + indexed(65))  # no fourth entry


# -- 4.1, 4.4 entry size and eviction -------------------------------------------------------------


def test_an_entry_counts_32_octets_more_than_its_name_and_value(c: RawH2) -> None:
    """4.1: "The size of an entry is the sum of its name's length in octets, its value's length
    in octets, and 32"; 4.4: entries are evicted from the end until the new one fits. Two
    entries of 2,048 fill the 4,096 octets; a third of 36 evicts the oldest, not the second."""
    first = incremental(b"x-a", b"a" * (2048 - 32 - 3))
    second = incremental(b"x-b", b"b" * (2048 - 32 - 3))
    served(c, REQUEST + first + second)
    served(c, REQUEST + incremental(b"x-c", b"c"))
    served(c, REQUEST + indexed(63))  # x-b
    decoding_error(c, REQUEST + indexed(64))  # x-a is gone


def test_an_entry_larger_than_the_table_empties_it(c: RawH2) -> None:
    """4.4: "an attempt to add an entry larger than the maximum size causes the table to be
    emptied of all existing entries and results in an empty table" (the field is still part of
    its header list: the call is served)."""
    served(c, REQUEST + incremental(b"x-small", b"1"))
    served(c, REQUEST + incremental(b"x-big", b"z" * 4096))
    decoding_error(c, REQUEST + indexed(62))


# -- 4.2, 6.3 dynamic table size updates ----------------------------------------------------------


def test_a_size_update_after_a_field_is_a_decoding_error(c: RawH2) -> None:
    """4.2: a size update "MUST occur at the beginning of the first field block following the
    change"; one after a field representation is a decoding error."""
    decoding_error(c, REQUEST + size_update(100))


def test_a_size_update_above_the_settings_limit_is_a_decoding_error(c: RawH2) -> None:
    """6.3: "The new maximum size MUST be lower than or equal to the limit determined by the
    protocol using HPACK" (SETTINGS_HEADER_TABLE_SIZE, 4,096 by default)."""
    decoding_error(c, size_update(4097) + REQUEST)


def test_two_size_updates_at_the_start_are_accepted(c: RawH2) -> None:
    """4.2: "the smallest maximum table size that occurs in that interval MUST be signaled in a
    dynamic table size update. The final maximum size is always signaled": two updates at the
    start of a block are allowed, and the smaller one evicts everything."""
    served(c, REQUEST + incremental(b"x-kept", b"no"))
    served(c, size_update(0) + size_update(4096) + REQUEST)
    decoding_error(c, REQUEST + indexed(62))


# -- 2.3.3, 6.1, 6.2 indexes ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "block",
    [indexed(0), indexed(62), b"\x7e" + string(b"v"), b"\x0f\x2f" + string(b"v")],
    ids=["index-0", "index-beyond-both-tables", "name-index-beyond", "plain-name-index-beyond"],
)
def test_an_index_outside_the_tables_is_a_decoding_error(c: RawH2, block: bytes) -> None:
    """6.1: "The index value of 0 is not used. It MUST be treated as a decoding error if found
    in an indexed header field representation"; 2.3.3: "Indices strictly greater than the sum of
    the lengths of both tables MUST be treated as a decoding error" (for names too)."""
    decoding_error(c, REQUEST + block)


def test_literals_without_indexing_leave_the_table_alone(c: RawH2) -> None:
    """6.2.2 / 6.2.3: literals without indexing and never indexed do not add to the table."""
    served(c, REQUEST + plain(b"x-plain", b"1") + b"\x10" + string(b"x-never") + string(b"2"))
    decoding_error(c, REQUEST + indexed(62))


# -- 5.1 integers, 5.2 Huffman strings -----------------------------------------------------------


@pytest.mark.parametrize(
    "block",
    [b"\xff" + b"\xff" * 5 + b"\x0f", b"\x00\x7f" + b"\xff" * 5 + b"\x0f", b"\xff\x80"],
    ids=["index-beyond-2^32", "length-beyond-2^32", "truncated-integer"],
)
def test_an_integer_too_large_or_cut_short_is_a_decoding_error(c: RawH2, block: bytes) -> None:
    """5.1: "Integer encodings that exceed implementation limits -- in value or octet length --
    MUST be treated as decoding errors" (this decoder: 2^32); one cut off by the end of the
    block cannot be decoded either."""
    decoding_error(c, REQUEST + block)


@pytest.mark.parametrize(
    "coded",
    [b"\x1f\xff", b"\x18", b"\xff\xff\xff\xff"],
    ids=["padding-beyond-7-bits", "padding-of-zeros", "eos-symbol"],
)
def test_a_huffman_string_badly_ended_is_a_decoding_error(c: RawH2, coded: bytes) -> None:
    """5.2: "A padding strictly longer than 7 bits MUST be treated as a decoding error. A
    padding not corresponding to the most significant bits of the code for the EOS symbol MUST
    be treated as a decoding error. A Huffman-encoded string literal containing the EOS symbol
    MUST be treated as a decoding error" ("a" is 00011: 0x1f is "a" and 3 bits of padding)."""
    decoding_error(c, REQUEST + b"\x00" + string(b"x-h") + hpack_int(len(coded), 7, 0x80) + coded)


def test_a_huffman_string_well_ended_is_served(c: RawH2) -> None:
    """5.2, the positive side: "a" with its 3 bits of EOS padding decodes."""
    served(c, REQUEST + b"\x00" + string(b"x-h") + b"\x81\x1f")
