"""The HPACK codec against RFC 7541's examples and, as an independent oracle, the ``hpack``
package: its encoder's blocks (dynamic table, Huffman, evictions, size updates) decode to what it
encoded, ours decode in it to what we encoded, and every malformed block is an ``HpackError``."""

from __future__ import annotations

import random

import hpack
import pytest

from rosettaserve.transport.hpack import Decoder, HpackError, encode

Fields = list[tuple[str, str]]


def table(decoder: Decoder) -> Fields:
    """The decoder's dynamic table, newest first, read through indexed fields (which leave it
    as it is): index 62 onwards, up to the first index that is not there."""
    entries: Fields = []
    for index in range(62, 127):
        try:
            entries += decoder.decode(bytes((0x80 | index,)))
        except HpackError:
            return entries
    raise AssertionError("a dynamic table longer than the test expects")


def latin1(fields: list[tuple[bytes, bytes]]) -> Fields:
    return [(name.decode("latin-1"), value.decode("latin-1")) for name, value in fields]


def oracle_decode(block: bytes) -> Fields:
    fields: Fields = []
    for name, value in hpack.Decoder().decode(block, raw=True):
        assert isinstance(name, bytes)
        assert isinstance(value, bytes)
        fields.append((name.decode("latin-1"), value.decode("latin-1")))
    return fields


# RFC 7541 Appendix C.2: one representation each, from an empty table.
@pytest.mark.parametrize(
    ("block", "field", "entries"),
    [
        (
            "400a 6375 7374 6f6d 2d6b 6579 0d63 7573 746f 6d2d 6865 6164 6572",
            ("custom-key", "custom-header"),
            [("custom-key", "custom-header")],
        ),
        ("040c 2f73 616d 706c 652f 7061 7468", (":path", "/sample/path"), []),
        ("1008 7061 7373 776f 7264 0673 6563 7265 74", ("password", "secret"), []),
        ("82", (":method", "GET"), []),
    ],
    ids=["C.2.1-incremental", "C.2.2-without", "C.2.3-never", "C.2.4-indexed"],
)
def test_rfc_field_representations(block: str, field: tuple[str, str], entries: Fields) -> None:
    decoder = Decoder()
    assert decoder.decode(bytes.fromhex(block)) == [field]
    assert table(decoder) == entries


REQUEST_1 = [(":method", "GET"), (":scheme", "http"), (":path", "/")]
AUTHORITY = (":authority", "www.example.com")
NO_CACHE = ("cache-control", "no-cache")
CUSTOM = ("custom-key", "custom-value")
REQUESTS = [
    (
        [*REQUEST_1, AUTHORITY],
        [AUTHORITY],
    ),
    (
        [*REQUEST_1, AUTHORITY, NO_CACHE],
        [NO_CACHE, AUTHORITY],
    ),
    (
        [(":method", "GET"), (":scheme", "https"), (":path", "/index.html"), AUTHORITY, CUSTOM],
        [CUSTOM, NO_CACHE, AUTHORITY],
    ),
]


# C.3 and C.4: three requests on one connection, without and with Huffman coding.
@pytest.mark.parametrize(
    "blocks",
    [
        [
            "8286 8441 0f77 7777 2e65 7861 6d70 6c65 2e63 6f6d",
            "8286 84be 5808 6e6f 2d63 6163 6865",
            "8287 85bf 400a 6375 7374 6f6d 2d6b 6579 0c63 7573 746f 6d2d 7661 6c75 65",
        ],
        [
            "8286 8441 8cf1 e3c2 e5f2 3a6b a0ab 90f4 ff",
            "8286 84be 5886 a8eb 1064 9cbf",
            "8287 85bf 4088 25a8 49e9 5ba9 7d7f 8925 a849 e95b b8e8 b4bf",
        ],
    ],
    ids=["C.3", "C.4-huffman"],
)
def test_rfc_requests(blocks: list[str]) -> None:
    decoder = Decoder()
    for block, (fields, entries) in zip(blocks, REQUESTS, strict=True):
        assert decoder.decode(bytes.fromhex(block)) == fields
        assert table(decoder) == entries


PRIVATE = ("cache-control", "private")
DATE_21 = ("date", "Mon, 21 Oct 2013 20:13:21 GMT")
DATE_22 = ("date", "Mon, 21 Oct 2013 20:13:22 GMT")
LOCATION = ("location", "https://www.example.com")
GZIP = ("content-encoding", "gzip")
COOKIE = ("set-cookie", "foo=ASDJKHQKBZXOQWEOPIUAXQWEOIU; max-age=3600; version=1")
RESPONSES = [
    (
        [(":status", "302"), PRIVATE, DATE_21, LOCATION],
        [LOCATION, DATE_21, PRIVATE, (":status", "302")],
    ),
    (
        [(":status", "307"), PRIVATE, DATE_21, LOCATION],
        [(":status", "307"), LOCATION, DATE_21, PRIVATE],
    ),
    (
        [(":status", "200"), PRIVATE, DATE_22, LOCATION, GZIP, COOKIE],
        [COOKIE, GZIP, DATE_22],
    ),
]


# C.5 and C.6: three responses with a 256-octet table, so that entries are evicted.
@pytest.mark.parametrize(
    "blocks",
    [
        [
            "4803 3330 3258 0770 7269 7661 7465 611d 4d6f 6e2c 2032 3120 4f63 7420 3230 3133"
            "2032 303a 3133 3a32 3120 474d 546e 1768 7474 7073 3a2f 2f77 7777 2e65 7861 6d70"
            "6c65 2e63 6f6d",
            "4803 3330 37c1 c0bf",
            "88c1 611d 4d6f 6e2c 2032 3120 4f63 7420 3230 3133 2032 303a 3133 3a32 3220 474d"
            "54c0 5a04 677a 6970 7738 666f 6f3d 4153 444a 4b48 514b 425a 584f 5157 454f 5049"
            "5541 5851 5745 4f49 553b 206d 6178 2d61 6765 3d33 3630 303b 2076 6572 7369 6f6e"
            "3d31",
        ],
        [
            "4882 6402 5885 aec3 771a 4b61 96d0 7abe 9410 54d4 44a8 2005 9504 0b81 66e0 82a6"
            "2d1b ff6e 919d 29ad 1718 63c7 8f0b 97c8 e9ae 82ae 43d3",
            "4883 640e ffc1 c0bf",
            "88c1 6196 d07a be94 1054 d444 a820 0595 040b 8166 e084 a62d 1bff c05a 839b d9ab"
            "77ad 94e7 821d d7f2 e6c7 b335 dfdf cd5b 3960 d5af 2708 7f36 72c1 ab27 0fb5 291f"
            "9587 3160 65c0 03ed 4ee5 b106 3d50 07",
        ],
    ],
    ids=["C.5", "C.6-huffman"],
)
def test_rfc_responses_evict(blocks: list[str]) -> None:
    decoder = Decoder(max_table_size=256)
    for block, (fields, entries) in zip(blocks, RESPONSES, strict=True):
        assert decoder.decode(bytes.fromhex(block)) == fields
        assert table(decoder) == entries


NAMES = [
    b":authority",
    b"content-type",
    b"te",
    b"user-agent",
    b"grpc-timeout",
    b"grpc-accept-encoding",
    b"x-request-id",
    b"x-custom-\xe9",
    b"",
]
GRPC_REQUEST = [
    (b":method", b"POST"),
    (b":scheme", b"http"),
    (b":path", b"/inference.GRPCInferenceService/ModelInfer"),
    (b":authority", b"localhost:8001"),
    (b"te", b"trailers"),
    (b"content-type", b"application/grpc"),
    (b"user-agent", b"grpc-python/1.73.0 grpc-c/45.0.0 (linux; chttp2)"),
    (b"grpc-accept-encoding", b"identity, deflate, gzip"),
]


def random_fields(rng: random.Random) -> list[tuple[bytes, bytes]]:
    """A header list that repeats some fields (indexed from the dynamic table when they are
    still there), with long values (multi-octet lengths) and every octet value."""
    fields = list(GRPC_REQUEST[: rng.randrange(len(GRPC_REQUEST) + 1)])
    for _ in range(rng.randrange(6)):
        value = bytes(rng.randrange(256) for _ in range(rng.choice([0, 1, 5, 30, 200])))
        fields.append((rng.choice(NAMES), rng.choice([value, b"0", b"abc"])))
    rng.shuffle(fields)
    return fields


@pytest.mark.parametrize("huffman", [True, False])
@pytest.mark.parametrize("table_size", [4096, 256, 60, 0])
def test_oracle_encoder_blocks_decode(huffman: bool, table_size: int) -> None:
    rng = random.Random(table_size * 2 + huffman)
    encoder = hpack.Encoder()
    encoder.header_table_size = table_size  # announced by a size update in the next block
    decoder = Decoder()
    for round_ in range(300):
        if round_ % 100 == 99:  # the encoder shrinks its table, then grows it back
            encoder.header_table_size = table_size // 2 if round_ < 200 else table_size
        fields = random_fields(rng)
        block = encoder.encode(fields, huffman=huffman)
        assert decoder.decode(block) == latin1(fields)


def test_oracle_never_indexed_fields() -> None:
    secret = hpack.NeverIndexedHeaderTuple("authorization", "Bearer x")
    block = hpack.Encoder().encode([secret, (":method", "POST")])
    assert block[0] & 0xF0 == 0x10  # never indexed: the oracle really sent one
    decoder = Decoder()
    assert decoder.decode(block) == [("authorization", "Bearer x"), (":method", "POST")]
    assert table(decoder) == []


def test_warm_grpc_requests_decode_from_the_dynamic_table() -> None:
    encoder = hpack.Encoder()
    decoder = Decoder()
    expected = latin1(GRPC_REQUEST)
    first = encoder.encode(GRPC_REQUEST)
    assert decoder.decode(first) == expected
    warm = encoder.encode(GRPC_REQUEST)
    assert len(warm) == len(GRPC_REQUEST)  # one octet a field: all indexed
    for _ in range(3):
        assert decoder.decode(warm) == expected


@pytest.mark.parametrize(
    "fields",
    [
        [(":status", "200"), ("content-type", "application/grpc")],
        [("grpc-status", "0"), ("grpc-message", "")],
        [(":status", "404"), (":status", "201"), ("grpc-message", "m" * 300)],
        [("accept-encoding", "gzip, deflate"), ("accept-encoding", "br")],
        [("x-\xe9\xff", "caf\xe9 \x00\x7f\x80\xff"), ("", "")],
        [(name, "v" * length) for name in ("x", "date") for length in (126, 127, 128, 16511)],
    ],
)
def test_encode_decodes_in_the_oracle(fields: Fields) -> None:
    block = encode(fields)
    assert oracle_decode(block) == fields
    decoder = Decoder()
    assert decoder.decode(block) == fields
    assert table(decoder) == []  # nothing was added to the peer's dynamic table


def test_encode_indexes_from_the_static_table_only() -> None:
    assert encode([(":status", "200"), (":method", "POST")]) == b"\x88\x83"
    # literal without indexing, name index 31 (content-type) on a 4-bit prefix: 15 + 16
    assert encode([("content-type", "application/grpc")]) == b"\x0f\x10\x10application/grpc"
    assert encode([("grpc-status", "0")]) == b"\x00\x0bgrpc-status\x010"
    assert encode([]) == b""


def test_encode_repeats_no_field_from_a_dynamic_table() -> None:
    fields = [("grpc-status", "0")]
    assert encode(fields + fields) == encode(fields) * 2


def test_size_update_shrinks_and_evicts() -> None:
    decoder = Decoder(max_table_size=100)
    decoder.decode(b"\x41\x01a\x41\x01b")  # two :authority entries, 42 octets each
    assert table(decoder) == [(":authority", "b"), (":authority", "a")]
    decoder.decode(b"\x3f\x1b")  # 31 + 27 = 58: room for one
    assert table(decoder) == [(":authority", "b")]
    assert decoder.decode(b"\x20\x3f\x45\x82") == [(":method", "GET")]  # 0 then 100
    assert table(decoder) == []
    decoder.decode(b"\x41\x01c")
    assert table(decoder) == [(":authority", "c")]


def test_entry_larger_than_the_table_empties_it() -> None:
    decoder = Decoder(max_table_size=64)
    decoder.decode(b"\x41\x01a")
    assert decoder.decode(b"\x41\x21" + b"x" * 33) == [(":authority", "x" * 33)]  # 75 > 64
    assert table(decoder) == []


def test_new_entry_may_name_the_entry_it_evicts() -> None:
    decoder = Decoder(max_table_size=50)
    decoder.decode(b"\x40\x0acustom-key\x01a")  # 43 octets
    # name index 62: the entry that adding this one evicts
    assert decoder.decode(b"\x7e\x01b") == [("custom-key", "b")]
    assert table(decoder) == [("custom-key", "b")]


def test_header_list_limit_is_inclusive() -> None:
    assert len(Decoder(max_header_list_size=84).decode(b"\x82\x82")) == 2  # 42 each
    with pytest.raises(HpackError, match="header list larger"):
        Decoder(max_header_list_size=83).decode(b"\x82\x82")


def literal(value_header: bytes, tail: bytes = b"") -> bytes:
    """A literal without indexing of :path (name index 4) whose value starts ``value_header``."""
    return b"\x04" + value_header + tail


def length(n: int, huffman: bool = False) -> bytes:
    """A string's length, on a 7-bit prefix."""
    first = 0x80 if huffman else 0
    if n < 0x7F:
        return bytes((first | n,))
    out = [first | 0x7F]
    n -= 0x7F
    while n >= 0x80:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


@pytest.mark.parametrize(
    "block",
    [
        b"\xff",  # indexed, integer cut after its prefix
        b"\xff\x80",  # ... inside its continuation
        b"\x40",  # literal, no name
        b"\x40\x05abc",  # name cut
        b"\x41\x05ab",  # value cut
        b"\x01",  # literal with indexed name, no value
        b"\x00\x01a",  # literal name, no value
        literal(length(50), b"x" * 49),
        literal(length(3, huffman=True), b"\x1f\x1f"),
        b"\x3f",  # size update cut
    ],
)
def test_truncated_block(block: bytes) -> None:
    with pytest.raises(HpackError, match="truncated"):
        Decoder().decode(block)


@pytest.mark.parametrize(
    "block",
    [
        b"\x80",  # indexed field 0
        b"\xbe",  # 62 on an empty dynamic table
        b"\xff\x80\x01",  # 127 + 128
        b"\x7e\x00",  # incremental indexing, name index 62
        b"\x0f\x30\x00",  # without indexing, name index 63
        b"\x41\x01a\xbf",  # 63 with one entry
    ],
)
def test_index_not_in_table(block: bytes) -> None:
    with pytest.raises(HpackError, match="not in the static or dynamic table"):
        Decoder().decode(block)


def test_dynamic_index_in_range_is_found() -> None:  # the positive side of the case above
    assert Decoder().decode(b"\x41\x01a\xbe") == [(":authority", "a"), (":authority", "a")]


def test_integer_limit() -> None:
    top = b"\xff\x81\xff\xff\xff\x0f"  # 127 + (2**32 - 127): exactly 2**32, an index past the end
    with pytest.raises(HpackError, match="not in the static or dynamic table"):
        Decoder().decode(top)
    with pytest.raises(HpackError, match=r"above 2\*\*32"):
        Decoder().decode(b"\xff\x82\xff\xff\xff\x0f")  # 2**32 + 1
    with pytest.raises(HpackError, match=r"above 2\*\*32"):
        Decoder().decode(b"\xff\xff\xff\xff\xff\x7f")
    with pytest.raises(HpackError, match="too many octets"):
        Decoder().decode(b"\xff" + b"\x80" * 10 + b"\x00")  # zeros, no overflow, endless


def test_huffman_string() -> None:  # "a" is 00011: a 5-bit code, then 3 bits of padding
    assert Decoder().decode(literal(b"\x81\x1f")) == [(":path", "a")]
    assert Decoder().decode(literal(b"\x80")) == [(":path", "")]


@pytest.mark.parametrize(
    ("block", "message"),
    [
        (literal(b"\x84\xff\xff\xff\xff"), "EOS"),  # 30 1s: EOS, in the middle of a string
        (literal(b"\x84\xff\xff\xff\xfc"), "EOS"),  # exactly EOS, then 2 bits
        (literal(b"\x82\x1f\xff"), "padding"),  # "a", then 11 1s
        (literal(b"\x81\xff"), "padding"),  # 8 1s and nothing else
        (literal(b"\x81\x18"), "padding"),  # "a", then 000
        (literal(b"\x81\x1e"), "padding"),  # "a", then 110
    ],
)
def test_invalid_huffman(block: bytes, message: str) -> None:
    with pytest.raises(HpackError, match=message):
        Decoder().decode(block)


def test_size_update_limit() -> None:
    assert Decoder(max_table_size=100).decode(b"\x3f\x45\x82") == [(":method", "GET")]  # 100
    with pytest.raises(HpackError, match="above 100"):
        Decoder(max_table_size=100).decode(b"\x3f\x46\x82")  # 101


@pytest.mark.parametrize("block", [b"\x82\x20", b"\x82\x3f\x45", b"\x20\x82\x20\x82"])
def test_size_update_after_a_field(block: bytes) -> None:
    with pytest.raises(HpackError, match="after the first header field"):
        Decoder().decode(block)


@pytest.mark.parametrize("huffman", [False, True])
@pytest.mark.parametrize("where", ["name", "value"])
def test_declared_length_beyond_the_list_limit(huffman: bool, where: str) -> None:
    """A length far beyond the block and the limit fails on the limit, before anything is
    copied: the block itself is a few octets."""
    declared = length(10**9, huffman) + b"abc"
    block = b"\x00" + declared if where == "name" else b"\x00\x01a" + declared
    with pytest.raises(HpackError, match="header list larger"):
        Decoder(max_header_list_size=1000).decode(block)


def test_declared_length_counts_the_entry_overhead() -> None:
    """5 (:path) + 80 fit in 100, not with the 32 octets of an entry: the limit fails, though
    the block is also cut short."""
    with pytest.raises(HpackError, match="header list larger"):
        Decoder(max_header_list_size=100).decode(literal(length(80)))


def test_list_limit_counts_every_field() -> None:
    decoder = Decoder(max_header_list_size=170)
    block = literal(length(100), b"x" * 100)  # 5 + 100 + 32 = 137 of 170
    assert decoder.decode(block) == [(":path", "x" * 100)]
    with pytest.raises(HpackError, match="header list larger"):
        decoder.decode(block + b"\x82")  # 137 + 42
    with pytest.raises(HpackError, match="header list larger"):
        decoder.decode(literal(length(200), b"x" * 200))  # fits in the block, not the limit


# RFC 9113 8.2.1: fields HPACK carries but HTTP/2 does not allow make the block malformed (a
# stream error), not undecodable: the block decodes, ``malformed`` says why, the table follows.
def inc(name: bytes, value: bytes) -> bytes:
    return b"\x40" + bytes([len(name)]) + name + bytes([len(value)]) + value


def test_a_forbidden_literal_is_malformed_and_still_indexed() -> None:
    decoder = Decoder()
    assert decoder.decode(inc(b"X-Up", b"1")) == [("X-Up", "1")]
    assert "X-Up" in decoder.malformed
    assert table(decoder) == [("X-Up", "1")]
    assert decoder.decode(b"\x82") == [(":method", "GET")]
    assert decoder.malformed == ""  # each block on its own


def test_a_forbidden_entry_is_malformed_whenever_it_is_indexed() -> None:
    decoder = Decoder()
    decoder.decode(inc(b"x-ok", b"1") + inc(b"x-bad", b" lead"))
    decoder.decode(b"\xbf")  # 63: x-ok
    assert decoder.malformed == ""
    decoder.decode(b"\xbe")  # 62: x-bad
    assert "x-bad" in decoder.malformed
    decoder.decode(b"\x7e\x01v")  # a literal named after x-bad: the name is fine
    assert decoder.malformed == ""


def test_a_forbidden_entry_evicted_leaves_the_table_clean() -> None:
    decoder = Decoder()
    decoder.decode(inc(b"x-bad", b"a\x00b"))
    decoder.decode(b"\x20\x3f\xe1\x1f")  # size 0, then 4096: every entry evicted
    decoder.decode(inc(b"x-ok", b"1"))
    decoder.decode(b"\xbe")
    assert decoder.malformed == ""
    assert decoder._tainted == 0
