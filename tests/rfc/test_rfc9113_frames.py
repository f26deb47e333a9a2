"""RFC 9113 sections 4 and 6, frames, one test per MUST, on a real server: the frame format and
size, header compression's framing, and each frame type's own rules (DATA, HEADERS, PRIORITY,
RST_STREAM, SETTINGS, PING, GOAWAY, WINDOW_UPDATE, CONTINUATION). Each error is the RFC's code;
after a stream error the connection still serves a call; after a connection error the server
sent GOAWAY and closed, and serves a new connection.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.rfc.h2_support import (
    ACK,
    COMPRESSION_ERROR,
    CONTINUATION,
    DATA,
    ENABLE_PUSH,
    END_HEADERS,
    END_STREAM,
    FLOW_CONTROL_ERROR,
    FRAME_SIZE_ERROR,
    GOAWAY,
    HEADERS,
    INITIAL_WINDOW_SIZE,
    MAX_FRAME_SIZE,
    PADDED,
    PING,
    PRIORITY,
    PROTOCOL_ERROR,
    PUSH_PROMISE,
    RST_STREAM,
    SETTINGS,
    WINDOW_UPDATE,
    RawH2,
    h2_server,
    infer_message,
    request_fields,
    settings_payload,
    u32,
)
from tests.serverproc import ServerProcess

MAX_WINDOW = (1 << 31) - 1


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    yield from h2_server(tmp_path_factory, "rfc9113_frames")


def advertised(c: RawH2) -> dict[int, int]:
    settings = c.wait(lambda f: f.kind == SETTINGS and not f.flags & ACK).payload
    return {
        int.from_bytes(settings[i : i + 2], "big"): int.from_bytes(settings[i + 2 : i + 6], "big")
        for i in range(0, len(settings), 6)
    }


# -- 4.1 frame format ---------------------------------------------------------------------------


def test_undefined_flags_are_ignored(c: RawH2) -> None:
    """4.1: "Flags that have no defined semantics for a particular frame type MUST be ignored"."""
    c.frame(PING, 0xFE, 0, b"12345678")  # every flag but ACK
    c.wait(lambda f: f.kind == PING and f.payload == b"12345678")
    stream_id = c.headers(request_fields())
    c.frame(DATA, END_STREAM | 0xF6, stream_id, infer_message())  # all but PADDED
    c.assert_ok(stream_id)


def test_reserved_bit_of_the_stream_id_is_ignored(c: RawH2) -> None:
    """4.1: the reserved bit "MUST remain unset (0x0) when sending and MUST be ignored when
    receiving"."""
    stream_id = c.headers(request_fields())
    c.frame(DATA, END_STREAM, stream_id | 0x80000000, infer_message())
    c.assert_ok(stream_id)


# -- 4.2 frame size -----------------------------------------------------------------------------


def test_a_frame_of_16384_bytes_is_accepted(c: RawH2) -> None:
    """4.2: "All implementations MUST be capable of receiving and minimally processing frames up
    to 2^14 octets in length" (here the first 16,384 bytes of a 20 kB message)."""
    body = infer_message(values=[float(i) for i in range(5000)])
    stream_id = c.headers(request_fields())
    c.frame(DATA, 0, stream_id, body[:16384])
    c.frame(DATA, END_STREAM, stream_id, body[16384:])
    c.assert_ok(stream_id)


@pytest.mark.parametrize("kind", [DATA, HEADERS], ids=["DATA", "HEADERS"])
def test_a_frame_above_the_advertised_max_frame_size_is_a_frame_size_error(
    c: RawH2, kind: int
) -> None:
    """4.2: "An endpoint MUST send an error code of FRAME_SIZE_ERROR if a frame exceeds the size
    defined in SETTINGS_MAX_FRAME_SIZE"; a HEADERS frame (it alters the connection's state) is
    a connection error."""
    limit = advertised(c).get(MAX_FRAME_SIZE, 16384)
    stream_id = c.headers(request_fields()) if kind == DATA else 1
    c.frame(kind, 0, stream_id, bytes(limit + 1))
    c.expect_goaway(FRAME_SIZE_ERROR)


def test_replies_never_exceed_the_clients_max_frame_size(c: RawH2) -> None:
    """4.2: "An endpoint MUST NOT send a frame unless it is smaller than or equal to the maximum
    frame size the peer advertised" (the default 16,384; a reply of 40,000 bytes)."""
    values = [float(i) for i in range(10_000)]
    stream_id = c.request(body=infer_message(values=values))
    c.ended(stream_id)
    data = [f for f in c.frames if f.stream_id == stream_id and f.kind == DATA]
    assert sum(len(f.payload) for f in data) > 40_000
    assert all(len(f.payload) <= 16384 for f in data), [len(f.payload) for f in data]


# -- 4.3 header compression and decompression ---------------------------------------------------


def test_a_header_block_that_does_not_decode_is_a_compression_error(c: RawH2) -> None:
    """4.3: "A decoding error in a field block MUST be treated as a connection error of type
    COMPRESSION_ERROR" (index 70: beyond the static table and the empty dynamic table)."""
    c.frame(HEADERS, END_HEADERS | END_STREAM, 1, b"\xc6")
    c.expect_goaway(COMPRESSION_ERROR)


@pytest.mark.parametrize("kind", [PRIORITY, DATA, HEADERS], ids=["PRIORITY", "DATA", "HEADERS"])
def test_a_header_block_is_one_contiguous_sequence_of_frames(c: RawH2, kind: int) -> None:
    """4.3: "Each field block is processed as a discrete unit. Field blocks MUST be transmitted as
    a contiguous sequence of frames, with no interleaved frames of any other type or from any
    other stream"; 6.2 / 6.10: a connection error of type PROTOCOL_ERROR."""
    block = c.block(request_fields())
    c.frame(HEADERS, 0, 1, block[:4])
    if kind == PRIORITY:
        c.frame(PRIORITY, 0, 1, u32(0) + b"\x10")
    elif kind == DATA:
        c.frame(DATA, 0, 1, b"x")
    else:
        c.frame(HEADERS, END_HEADERS, 3, block)
    c.frame(CONTINUATION, END_HEADERS, 1, block[4:])
    c.expect_goaway(PROTOCOL_ERROR)


def test_the_header_block_of_a_reset_stream_still_updates_the_table(c: RawH2) -> None:
    """4.3: a field block must be decoded even when its stream is to be reset ("the receiver
    MUST ... process it"): a malformed request adds a field to the dynamic table, and the next
    request indexes that field."""
    marker = ("x-marker", "indexed-next")
    bad = c.headers([*request_fields(), marker, ("upgrade", "h2c")])
    c.wait(lambda f: f.kind == RST_STREAM and f.stream_id == bad)
    stream_id = c.headers([*request_fields(), marker])  # marker indexed: c's encoder has it
    c.frame(DATA, END_STREAM, stream_id, infer_message())
    c.assert_ok(stream_id)


# -- 6.1 DATA -----------------------------------------------------------------------------------


def test_data_on_stream_zero_is_a_connection_error(c: RawH2) -> None:
    """6.1: "If a DATA frame is received whose Stream Identifier field is 0x00, the recipient
    MUST respond with a connection error of type PROTOCOL_ERROR"."""
    c.frame(DATA, 0, 0, b"x")
    c.expect_goaway(PROTOCOL_ERROR)


@pytest.mark.parametrize("kind", [DATA, HEADERS], ids=["DATA", "HEADERS"])
def test_padding_as_long_as_the_payload_is_a_connection_error(c: RawH2, kind: int) -> None:
    """6.1 / 6.2: "If the length of the padding is the length of the frame payload or greater,
    the recipient MUST treat this as a connection error of type PROTOCOL_ERROR"."""
    if kind == DATA:
        stream_id = c.headers(request_fields())
        c.frame(DATA, PADDED, stream_id, b"\x05" + b"abcd")
    else:
        c.frame(HEADERS, PADDED | END_HEADERS, 1, b"\x09" + c.block(request_fields())[:8])
    c.expect_goaway(PROTOCOL_ERROR)


# -- 6.2 HEADERS --------------------------------------------------------------------------------


def test_headers_on_stream_zero_is_a_connection_error(c: RawH2) -> None:
    """6.2: "If a HEADERS frame is received whose Stream Identifier field is 0x00, the recipient
    MUST respond with a connection error of type PROTOCOL_ERROR"."""
    c.frame(HEADERS, END_HEADERS, 0, c.block(request_fields()))
    c.expect_goaway(PROTOCOL_ERROR)


def test_padded_headers_with_priority_are_served(c: RawH2) -> None:
    """6.2: the Pad Length, the priority fields and the padding are not part of the block."""
    stream_id = c.new_stream()
    payload = b"\x03" + u32(0) + b"\x10" + c.block(request_fields()) + b"\x00\x00\x00"
    c.frame(HEADERS, END_HEADERS | PADDED | 0x20, stream_id, payload)
    c.frame(DATA, END_STREAM, stream_id, infer_message())
    c.assert_ok(stream_id)


# -- 6.3 PRIORITY -------------------------------------------------------------------------------


def test_priority_on_stream_zero_is_a_connection_error(c: RawH2) -> None:
    """6.3: "If a PRIORITY frame is received with a stream identifier of 0x00, the recipient
    MUST respond with a connection error of type PROTOCOL_ERROR"."""
    c.frame(PRIORITY, 0, 0, u32(1) + b"\x10")
    c.expect_goaway(PROTOCOL_ERROR)


def test_priority_of_another_length_is_a_stream_frame_size_error(c: RawH2) -> None:
    """6.3: "A PRIORITY frame with a length other than 5 octets MUST be treated as a stream
    error of type FRAME_SIZE_ERROR"."""
    stream_id = c.headers(request_fields())
    c.frame(PRIORITY, 0, stream_id, u32(0))
    c.expect_reset(stream_id, FRAME_SIZE_ERROR)


# -- 6.4 RST_STREAM -----------------------------------------------------------------------------


def test_rst_stream_on_stream_zero_is_a_connection_error(c: RawH2) -> None:
    """6.4: "If a RST_STREAM frame is received with a stream identifier of 0x00, the recipient
    MUST treat this as a connection error of type PROTOCOL_ERROR"."""
    c.frame(RST_STREAM, 0, 0, u32(8))
    c.expect_goaway(PROTOCOL_ERROR)


def test_rst_stream_of_another_length_is_a_frame_size_error(c: RawH2) -> None:
    """6.4: "A RST_STREAM frame with a length other than 4 octets MUST be treated as a connection
    error of type FRAME_SIZE_ERROR"."""
    stream_id = c.headers(request_fields())
    c.frame(RST_STREAM, 0, stream_id, b"\x00\x00\x08")
    c.expect_goaway(FRAME_SIZE_ERROR)


def test_rst_stream_with_an_unknown_error_code_cancels_the_stream(c: RawH2) -> None:
    """7: "Unknown or unsupported error codes MUST NOT trigger any special behavior"."""
    stream_id = c.headers(request_fields())
    c.frame(RST_STREAM, 0, stream_id, u32(0xABCD))
    c.sync()
    assert not c.goaways()
    c.serves()


# -- 6.5 SETTINGS -------------------------------------------------------------------------------


def test_settings_are_acknowledged(c: RawH2) -> None:
    """6.5.3: "Upon receiving a SETTINGS frame without the ACK flag set, the recipient MUST
    immediately emit a SETTINGS frame with the ACK flag set" (empty, as 6.5 requires)."""
    acks = len([f for f in c.frames if f.kind == SETTINGS and f.flags & ACK])
    c.frame(SETTINGS, 0, 0, settings_payload([(INITIAL_WINDOW_SIZE, 100_000)]))
    c.sync()  # the ACK comes before the PING's
    now = [f for f in c.frames if f.kind == SETTINGS and f.flags & ACK]
    assert len(now) == acks + 1
    assert now[-1].payload == b""


def test_settings_ack_with_a_payload_is_a_frame_size_error(c: RawH2) -> None:
    """6.5: "Receipt of a SETTINGS frame with the ACK flag set and a length field value other
    than 0 MUST be treated as a connection error of type FRAME_SIZE_ERROR"."""
    c.frame(SETTINGS, ACK, 0, settings_payload([(INITIAL_WINDOW_SIZE, 1)]))
    c.expect_goaway(FRAME_SIZE_ERROR)


def test_settings_on_a_stream_is_a_connection_error(c: RawH2) -> None:
    """6.5: "If an endpoint receives a SETTINGS frame whose Stream Identifier field is anything
    other than 0x00, the endpoint MUST respond with a connection error of type PROTOCOL_ERROR"."""
    c.frame(SETTINGS, 0, 1, b"")
    c.expect_goaway(PROTOCOL_ERROR)


def test_settings_not_a_multiple_of_six_is_a_frame_size_error(c: RawH2) -> None:
    """6.5: "A SETTINGS frame with a length other than a multiple of 6 octets MUST be treated as
    a connection error of type FRAME_SIZE_ERROR"."""
    c.frame(SETTINGS, 0, 0, settings_payload([(INITIAL_WINDOW_SIZE, 1)])[:5])
    c.expect_goaway(FRAME_SIZE_ERROR)


@pytest.mark.parametrize(
    ("setting", "value", "code"),
    [
        (ENABLE_PUSH, 2, PROTOCOL_ERROR),
        (INITIAL_WINDOW_SIZE, MAX_WINDOW + 1, FLOW_CONTROL_ERROR),
        (MAX_FRAME_SIZE, 16383, PROTOCOL_ERROR),
        (MAX_FRAME_SIZE, 1 << 24, PROTOCOL_ERROR),
    ],
    ids=["enable-push-2", "window-2^31", "frame-size-below-2^14", "frame-size-2^24"],
)
def test_setting_values_out_of_range_are_connection_errors(
    c: RawH2, setting: int, value: int, code: int
) -> None:
    """6.5.2: SETTINGS_ENABLE_PUSH "Any value other than 0 or 1 MUST be treated as a connection
    error of type PROTOCOL_ERROR"; SETTINGS_INITIAL_WINDOW_SIZE above 2^31-1 "MUST be treated as
    a connection error of type FLOW_CONTROL_ERROR"; SETTINGS_MAX_FRAME_SIZE outside 2^14..2^24-1
    "MUST be treated as a connection error of type PROTOCOL_ERROR"."""
    c.frame(SETTINGS, 0, 0, settings_payload([(setting, value)]))
    c.expect_goaway(code)


def test_settings_values_are_processed_in_order(server: ServerProcess) -> None:
    """6.5.3: "The values in the SETTINGS frame MUST be processed in the order they appear": a
    window of 1, then of 100,000 in the same frame leaves 100,000 (a reply goes out whole)."""
    settings = [(INITIAL_WINDOW_SIZE, 1), (INITIAL_WINDOW_SIZE, 100_000)]
    with RawH2(server.grpc_address, settings=settings) as c:
        stream_id = c.request()
        c.assert_ok(stream_id)


# -- 6.7 PING -----------------------------------------------------------------------------------


def test_ping_is_answered_with_the_same_payload(c: RawH2) -> None:
    """6.7: "Receivers of a PING frame that does not include an ACK flag MUST send a PING frame
    with the ACK flag set in response, with an identical frame payload"."""
    c.frame(PING, 0, 0, b"\x01\x02\x03\x04\x05\x06\x07\x08")
    ack = c.wait(lambda f: f.kind == PING)
    assert (ack.flags, ack.stream_id, ack.payload) == (ACK, 0, b"\x01\x02\x03\x04\x05\x06\x07\x08")


def test_ping_ack_is_not_answered(c: RawH2) -> None:
    """6.7: "An endpoint MUST NOT respond to PING frames containing this flag"."""
    c.frame(PING, ACK, 0, b"unasked!")
    c.sync()
    assert not [f for f in c.frames if f.kind == PING and f.payload == b"unasked!"]


def test_ping_on_a_stream_is_a_protocol_error(c: RawH2) -> None:
    """6.7: "If a PING frame is received with a Stream Identifier field value other than 0x00,
    the recipient MUST respond with a connection error of type PROTOCOL_ERROR"."""
    stream_id = c.headers(request_fields())
    c.frame(PING, 0, stream_id, b"12345678")
    c.expect_goaway(PROTOCOL_ERROR)


def test_ping_of_another_length_is_a_frame_size_error(c: RawH2) -> None:
    """6.7: "Receipt of a PING frame with a length field value other than 8 MUST be treated as a
    connection error of type FRAME_SIZE_ERROR"."""
    c.frame(PING, 0, 0, b"1234567")
    c.expect_goaway(FRAME_SIZE_ERROR)


# -- 6.8 GOAWAY ---------------------------------------------------------------------------------


def test_goaway_on_a_stream_is_a_protocol_error(c: RawH2) -> None:
    """6.8: "An endpoint MUST treat a GOAWAY frame with a stream identifier other than 0x00 as a
    connection error of type PROTOCOL_ERROR"."""
    stream_id = c.headers(request_fields())
    c.frame(GOAWAY, 0, stream_id, u32(0) + u32(0))
    c.expect_goaway(PROTOCOL_ERROR)


def test_goaway_with_an_unknown_error_code_is_no_error(c: RawH2) -> None:
    """7: "Unknown or unsupported error codes MUST NOT trigger any special behavior": the
    stream opened before it is answered."""
    stream_id = c.request()
    c.frame(GOAWAY, 0, 0, u32(stream_id) + u32(0xABCD))
    c.assert_ok(stream_id)
    assert not c.goaways()


# -- 6.9 WINDOW_UPDATE --------------------------------------------------------------------------


def test_window_update_of_zero_on_the_connection_is_a_connection_error(c: RawH2) -> None:
    """6.9: "errors on the connection flow-control window MUST be treated as a connection error"
    (an increment of 0: PROTOCOL_ERROR)."""
    c.frame(WINDOW_UPDATE, 0, 0, u32(0))
    c.expect_goaway(PROTOCOL_ERROR)


def test_window_update_of_zero_on_a_stream_is_a_stream_error(c: RawH2) -> None:
    """6.9: "A receiver MUST treat the receipt of a WINDOW_UPDATE frame with a flow-control
    window increment of 0 as a stream error of type PROTOCOL_ERROR"."""
    stream_id = c.headers(request_fields())
    c.frame(WINDOW_UPDATE, 0, stream_id, u32(0))
    c.expect_reset(stream_id, PROTOCOL_ERROR)


def test_window_update_of_another_length_is_a_frame_size_error(c: RawH2) -> None:
    """6.9: "A WINDOW_UPDATE frame with a length other than 4 octets MUST be treated as a
    connection error of type FRAME_SIZE_ERROR"."""
    c.frame(WINDOW_UPDATE, 0, 0, b"\x00\x00\x01")
    c.expect_goaway(FRAME_SIZE_ERROR)


def test_connection_window_above_2_31_is_a_flow_control_error(c: RawH2) -> None:
    """6.9.1: "If a sender receives a WINDOW_UPDATE that causes a flow-control window to exceed
    this maximum, it MUST terminate ... the connection" with FLOW_CONTROL_ERROR."""
    c.frame(WINDOW_UPDATE, 0, 0, u32(MAX_WINDOW))
    c.expect_goaway(FLOW_CONTROL_ERROR)


def test_stream_window_above_2_31_is_a_stream_flow_control_error(c: RawH2) -> None:
    """6.9.1: the same on a stream's window: "the stream" is terminated (RST_STREAM with
    FLOW_CONTROL_ERROR)."""
    stream_id = c.headers(request_fields())
    c.frame(WINDOW_UPDATE, 0, stream_id, u32(MAX_WINDOW))
    c.expect_reset(stream_id, FLOW_CONTROL_ERROR)


def test_replies_wait_for_the_window(server: ServerProcess) -> None:
    """6.9.1: "The sender MUST NOT send a flow-controlled frame with a length that exceeds the
    space available in either of the flow-control windows": with a stream window of 1, one byte
    of DATA, then nothing until the window grows."""
    with RawH2(server.grpc_address, settings=[(INITIAL_WINDOW_SIZE, 1)]) as c:
        stream_id = c.request()
        c.wait(lambda f: f.kind == DATA and f.stream_id == stream_id)
        c.sync()
        assert len(c.data[stream_id]) == 1, c.seen()
        c.frame(WINDOW_UPDATE, 0, stream_id, u32(1 << 20))
        c.assert_ok(stream_id)


def test_a_change_of_initial_window_size_moves_open_streams(server: ServerProcess) -> None:
    """6.9.2: "When the value of SETTINGS_INITIAL_WINDOW_SIZE changes, a receiver MUST adjust
    the size of all stream flow-control windows that it maintains by the difference", a window
    may go negative ("MUST track the negative flow-control window"): with 1 byte sent of a window
    of 1, a new initial size of 0 leaves it at -1, and one of 100,000 lets the rest go."""
    with RawH2(server.grpc_address, settings=[(INITIAL_WINDOW_SIZE, 1)]) as c:
        stream_id = c.request()
        c.wait(lambda f: f.kind == DATA and f.stream_id == stream_id)
        c.frame(SETTINGS, 0, 0, settings_payload([(INITIAL_WINDOW_SIZE, 0)]))
        c.sync()
        assert len(c.data[stream_id]) == 1
        c.frame(SETTINGS, 0, 0, settings_payload([(INITIAL_WINDOW_SIZE, 100_000)]))
        c.assert_ok(stream_id)


def test_a_change_of_initial_window_size_beyond_2_31_is_a_flow_control_error(c: RawH2) -> None:
    """6.9.2: "An endpoint MUST treat a change to SETTINGS_INITIAL_WINDOW_SIZE that causes any
    flow-control window to exceed the maximum size as a connection error of type
    FLOW_CONTROL_ERROR"."""
    stream_id = c.headers(request_fields())
    c.frame(WINDOW_UPDATE, 0, stream_id, u32(MAX_WINDOW - 65535))  # the stream's window: max
    c.frame(SETTINGS, 0, 0, settings_payload([(INITIAL_WINDOW_SIZE, 65536)]))
    c.expect_goaway(FLOW_CONTROL_ERROR)


# -- 6.10 CONTINUATION --------------------------------------------------------------------------


def test_continuation_frames_carry_the_rest_of_a_block(c: RawH2) -> None:
    """6.10: "Any number of CONTINUATION frames can be sent" after a HEADERS frame without
    END_HEADERS; the block is whole at the one with END_HEADERS."""
    stream_id = c.new_stream()
    block = c.block(request_fields())
    pieces = [block[i : i + 3] for i in range(0, len(block), 3)]
    c.frame(HEADERS, 0, stream_id, pieces[0])
    for i, piece in enumerate(pieces[1:], start=2):
        c.frame(CONTINUATION, END_HEADERS if i == len(pieces) else 0, stream_id, piece)
    c.frame(DATA, END_STREAM, stream_id, infer_message())
    c.assert_ok(stream_id)


@pytest.mark.parametrize(
    "before", ["nothing", "end-headers", "continuation-end-headers", "data", "other-stream"]
)
def test_continuation_without_an_open_header_block_is_a_connection_error(
    c: RawH2, before: str
) -> None:
    """6.10: "A CONTINUATION frame MUST be preceded by a HEADERS, PUSH_PROMISE or CONTINUATION
    frame without the END_HEADERS flag set. A recipient that observes violation of this rule
    MUST respond with a connection error of type PROTOCOL_ERROR"; and "If a CONTINUATION frame
    is received with a Stream Identifier field of 0x00, the recipient MUST respond with a
    connection error of type PROTOCOL_ERROR" (the block on stream 1 goes on on stream 3)."""
    block = c.block(request_fields())
    if before == "end-headers":
        c.frame(HEADERS, END_HEADERS, 1, block)
    elif before == "continuation-end-headers":
        c.frame(HEADERS, 0, 1, block[:3])
        c.frame(CONTINUATION, END_HEADERS, 1, block[3:])
    elif before == "data":
        c.frame(HEADERS, END_HEADERS, 1, block)
        c.frame(DATA, 0, 1, b"x")
    elif before == "other-stream":
        c.frame(HEADERS, 0, 1, block[:3])
        c.frame(CONTINUATION, END_HEADERS, 3, block[3:])
        c.expect_goaway(PROTOCOL_ERROR)
        return
    c.frame(CONTINUATION, END_HEADERS, 1 if before != "nothing" else 0, b"\x88")
    c.expect_goaway(PROTOCOL_ERROR)


# -- 8.4 server push ----------------------------------------------------------------------------


def test_push_promise_from_a_client_is_a_connection_error(c: RawH2) -> None:
    """8.4: "A client cannot push. Thus, servers MUST treat the receipt of a PUSH_PROMISE frame
    as a connection error of type PROTOCOL_ERROR"."""
    stream_id = c.headers(request_fields())
    c.frame(PUSH_PROMISE, END_HEADERS, stream_id, u32(2) + c.block([(":method", "GET")]))
    c.expect_goaway(PROTOCOL_ERROR)
