"""RFC 9113 section 8, HTTP semantics in HTTP/2, one test per MUST, on a real server: a malformed
request (8.1.1) is a stream error of type PROTOCOL_ERROR, never served as a call, and the
connection goes on (its HPACK state intact: the next request on it succeeds). Malformed: field
names with uppercase or other characters HTTP/2 does not allow, field values with NUL, CR, LF or
surrounding white space (8.2.1), connection-specific fields (8.2.2), pseudo-header fields that
are unknown, of a response, after a regular field or in trailers (8.3), a request without, with
two, or with an empty ``:method`` ``:scheme`` ``:path`` (8.3.1), a ``content-length`` the DATA
does not add up to (8.1.1), trailers that do not end the stream (8.1).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.rfc.h2_support import (
    DATA,
    END_STREAM,
    PROTOCOL_ERROR,
    RawH2,
    h2_server,
    infer_message,
    request_fields,
)
from tests.serverproc import ServerProcess

Fields = list[tuple[str | bytes, str | bytes]]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    yield from h2_server(tmp_path_factory, "rfc9113_messages")


def refused_as_malformed(c: RawH2, fields: Fields, *, end_stream: bool = True) -> None:
    """The request is reset with PROTOCOL_ERROR, not answered; the connection goes on."""
    stream_id = c.headers(fields, end_stream=end_stream)
    if not end_stream:
        c.frame(DATA, END_STREAM, stream_id, infer_message())
    c.expect_reset(stream_id, PROTOCOL_ERROR)
    assert stream_id not in c.blocks, f"a malformed request was answered: {c.blocks[stream_id]}"


def without(name: str) -> Fields:
    return [field for field in request_fields() if field[0] != name]


def pseudo_first(*extra: tuple[str, str]) -> Fields:
    """``extra`` pseudo-header fields right after the request's own (still before any regular)."""
    fields = request_fields()
    return [*fields[:4], *extra, *fields[4:]]


# -- 8.2 / 8.2.1 field names and values ---------------------------------------------------------


@pytest.mark.parametrize(
    "name",
    [b"X-Upper", b"content-Type", b"with space", b"colon:inside", b"\xe9t\xe9", b"", b"tab\there"],
    ids=["uppercase", "uppercase-known", "space", "colon", "non-ascii", "empty", "tab"],
)
def test_field_name_with_a_forbidden_character_is_malformed(c: RawH2, name: bytes) -> None:
    """8.2: "Field names MUST be converted to lowercase when constructing an HTTP/2 message";
    8.2.1: "A field name MUST NOT contain characters in the ranges 0x00-0x20, 0x41-0x5a, or
    0x7f-0xff (all ranges inclusive) ... With the exception of pseudo-header fields ... field
    names MUST NOT include a colon"; "A request or response that contains a field that violates
    any of these conditions MUST be treated as malformed"."""
    refused_as_malformed(c, [*request_fields(), (name, b"1")])


@pytest.mark.parametrize(
    "value",
    [b"nul\x00inside", b"line\nfeed", b"carriage\rreturn", b" leading", b"trailing\t"],
    ids=["nul", "lf", "cr", "leading-space", "trailing-tab"],
)
def test_field_value_with_a_forbidden_character_is_malformed(c: RawH2, value: bytes) -> None:
    """8.2.1: "A field value MUST NOT contain the zero value (ASCII NUL, 0x00), line feed (ASCII
    LF, 0x0a), or carriage return (ASCII CR, 0x0d) at any position. A field value MUST NOT start
    or end with an ASCII whitespace character (ASCII SP or HTAB, 0x20 or 0x09)"."""
    refused_as_malformed(c, [*request_fields(), (b"x-value", value)])


def test_a_forbidden_field_is_malformed_again_when_indexed(c: RawH2) -> None:
    """8.2.1 with RFC 7541: a malformed field the client added to the dynamic table is
    malformed each time a later request refers to it by its index."""
    bad = ("X-Indexed", "1")
    refused_as_malformed(c, [*request_fields(), bad])
    refused_as_malformed(c, [*request_fields(), bad])  # now an index into the table
    c.serves()


def test_inner_white_space_and_visible_characters_are_allowed(c: RawH2) -> None:
    """8.2.1 forbids only what it names: a tab or spaces inside a value and the visible ASCII in
    a name are served."""
    stream_id = c.headers([*request_fields(), ("x-!#$%&'*+-.^_`|~09", "a \t b")])
    c.frame(DATA, END_STREAM, stream_id, infer_message())
    c.assert_ok(stream_id)


# -- 8.2.2 connection-specific fields ------------------------------------------------------------


@pytest.mark.parametrize(
    "field",
    [
        ("connection", "keep-alive"),
        ("keep-alive", "timeout=5"),
        ("proxy-connection", "keep-alive"),
        ("transfer-encoding", "chunked"),
        ("upgrade", "h2c"),
        ("te", "gzip"),
        ("te", "trailers, deflate"),
    ],
    ids=lambda field: f"{field[0]}: {field[1]}",
)
def test_connection_specific_field_is_malformed(c: RawH2, field: tuple[str, str]) -> None:
    """8.2.2: "An endpoint MUST NOT generate an HTTP/2 message containing connection-specific
    header fields ... Any message containing connection-specific header fields MUST be treated
    as malformed"; "The only exception to this is the TE header field, which MAY be present in
    an HTTP/2 request; when it is, it MUST NOT contain any value other than "trailers"."."""
    refused_as_malformed(c, [*request_fields(), field])


def test_te_trailers_is_allowed(c: RawH2) -> None:
    """8.2.2: ``te: trailers`` (what every gRPC client sends) is served."""
    c.serves()


# -- 8.3 pseudo-header fields -------------------------------------------------------------------


@pytest.mark.parametrize(
    "field",
    [(":status", "200"), (":unknown", "x"), (":protocol", "websocket")],
    ids=["response-status", "unknown", "protocol-not-enabled"],
)
def test_pseudo_header_not_defined_for_requests_is_malformed(
    c: RawH2, field: tuple[str, str]
) -> None:
    """8.3: "Endpoints MUST treat a request or response that contains undefined or invalid
    pseudo-header fields as malformed"; "Pseudo-header fields defined for responses MUST NOT
    appear in requests" (``:protocol`` too: SETTINGS_ENABLE_CONNECT_PROTOCOL is not offered)."""
    refused_as_malformed(c, pseudo_first(field))


def test_pseudo_header_after_a_regular_field_is_malformed(c: RawH2) -> None:
    """8.3: "All pseudo-header fields MUST appear in a field block before all regular field
    lines. Any request or response that contains a pseudo-header field that appears in a field
    block after a regular field line MUST be treated as malformed"."""
    fields = request_fields()
    refused_as_malformed(c, [fields[0], fields[1], fields[3], fields[4], fields[2], *fields[5:]])


def test_pseudo_header_in_trailers_is_malformed(c: RawH2) -> None:
    """8.3: "Pseudo-header fields MUST NOT appear in a trailer section"."""
    stream_id = c.headers(request_fields())
    c.frame(DATA, 0, stream_id, infer_message())
    c.headers([(":path", "/x")], stream_id=stream_id, end_stream=True)
    c.expect_reset(stream_id, PROTOCOL_ERROR)


def test_connection_specific_field_in_trailers_is_malformed(c: RawH2) -> None:
    """8.2.2 holds for every field section, trailers too."""
    stream_id = c.headers(request_fields())
    c.frame(DATA, 0, stream_id, infer_message())
    c.headers([("transfer-encoding", "chunked")], stream_id=stream_id, end_stream=True)
    c.expect_reset(stream_id, PROTOCOL_ERROR)


def test_well_formed_trailers_end_the_request(c: RawH2) -> None:
    """8.1: a request may end with a trailer section: it is served."""
    stream_id = c.headers(request_fields())
    c.frame(DATA, 0, stream_id, infer_message())
    c.headers([("x-checksum", "1")], stream_id=stream_id, end_stream=True)
    c.assert_ok(stream_id)


def test_trailers_without_end_stream_are_malformed(c: RawH2) -> None:
    """8.1: "An endpoint that receives a HEADERS frame without the END_STREAM flag set after
    receiving the HEADERS frame that opens a request ... MUST treat the corresponding request
    ... as malformed"."""
    stream_id = c.headers(request_fields())
    c.frame(DATA, 0, stream_id, infer_message())
    c.headers([("x-checksum", "1")], stream_id=stream_id, end_stream=False)
    c.expect_reset(stream_id, PROTOCOL_ERROR)


# -- 8.3.1 request pseudo-header fields ----------------------------------------------------------


@pytest.mark.parametrize("name", [":method", ":scheme", ":path"])
def test_request_without_a_required_pseudo_header_is_malformed(c: RawH2, name: str) -> None:
    """8.3.1: "All HTTP/2 requests MUST include exactly one valid value for the ":method",
    ":scheme", and ":path" pseudo-header fields, unless they are CONNECT requests"; "An HTTP
    request that omits mandatory pseudo-header fields or contains invalid values for those
    pseudo-header fields is malformed"."""
    refused_as_malformed(c, without(name))


@pytest.mark.parametrize("name", [":method", ":scheme", ":path", ":authority"])
def test_request_with_a_pseudo_header_twice_is_malformed(c: RawH2, name: str) -> None:
    """8.3.1: exactly one value of each (``:authority`` too: "pseudo-header fields MUST NOT
    appear more than once")."""
    value = dict(request_fields())[name]
    refused_as_malformed(c, pseudo_first((name, value)))


@pytest.mark.parametrize("name", [":method", ":scheme", ":path"])
def test_request_with_an_empty_pseudo_header_is_malformed(c: RawH2, name: str) -> None:
    """8.3.1: ":path" "MUST NOT be empty for "http" or "https" URIs"; an empty ":method" or
    ":scheme" is no valid value either."""
    fields: Fields = [(n, "" if n == name else v) for n, v in request_fields()]
    refused_as_malformed(c, fields)


def test_connect_with_scheme_and_path_is_malformed(c: RawH2) -> None:
    """8.5: in a CONNECT request "The ":scheme" and ":path" pseudo-header fields MUST be
    omitted"."""
    fields: Fields = [(n, "CONNECT" if n == ":method" else v) for n, v in request_fields()]
    refused_as_malformed(c, fields)


def test_connect_with_authority_alone_is_well_formed_and_refused_by_grpc(c: RawH2) -> None:
    """8.5: a well-formed CONNECT (``:method`` and ``:authority``) is no stream error; gRPC
    answers it 405, since it serves POST alone."""
    stream_id = c.headers([(":method", "CONNECT"), (":authority", "localhost:1")], end_stream=True)
    c.ended(stream_id)
    assert c.http_status(stream_id) == "405", c.seen()
    assert not c.resets(stream_id) or c.resets(stream_id) == [0]


def test_host_that_differs_from_authority_is_malformed(c: RawH2) -> None:
    """8.3.1: "A server SHOULD treat a request as malformed if it contains a Host header field
    that identifies an entity that differs from the entity in the ":authority" pseudo-header
    field"."""
    refused_as_malformed(c, [*request_fields(), ("host", "elsewhere.example")])


# -- 8.1.1 content-length -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("extra", "frames"),
    [(-20, 1), (-20, 2), (5, 2), (1000, 1)],
    ids=["more-data", "more-data-in-the-second-frame", "less-data-over-two-frames", "less-data"],
)
def test_content_length_the_data_contradicts_is_malformed(
    c: RawH2, extra: int, frames: int
) -> None:
    """8.1.1: "A request or response is also malformed if the value of a content-length header
    field does not equal the sum of the DATA frame payload lengths that form the content"."""
    body = infer_message()
    stream_id = c.headers([*request_fields(), ("content-length", str(len(body) + extra))])
    pieces = [body] if frames == 1 else [body[:30], body[30:]]
    for i, piece in enumerate(pieces):
        c.frame(DATA, END_STREAM if i == len(pieces) - 1 else 0, stream_id, piece)
    c.expect_reset(stream_id, PROTOCOL_ERROR)


def test_content_length_with_no_data_is_malformed(c: RawH2) -> None:
    """8.1.1: a HEADERS frame that ends the stream, declaring a content-length above 0."""
    refused_as_malformed(c, [*request_fields(), ("content-length", "12")])


@pytest.mark.parametrize("value", ["-1", "1.0", "0x10", "1, 2", " 12"])
def test_content_length_that_is_not_a_number_is_malformed(c: RawH2, value: str) -> None:
    """RFC 9110 8.6 (content-length = 1*DIGIT), as 8.1.1 applies it: no valid length."""
    refused_as_malformed(c, [*request_fields(), ("content-length", value)], end_stream=False)


def test_content_length_that_matches_is_served(c: RawH2) -> None:
    """8.1.1: a content-length equal to the DATA, over two frames and with padding (padding is
    no content), is served."""
    body = infer_message()
    stream_id = c.headers([*request_fields(), ("content-length", str(len(body)))])
    c.frame(DATA, 0x8, stream_id, b"\x04" + body[:20] + bytes(4))  # PADDED
    c.frame(DATA, END_STREAM, stream_id, body[20:])
    c.assert_ok(stream_id)
