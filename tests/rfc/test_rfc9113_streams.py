"""RFC 9113 section 5, streams and multiplexing, one test per MUST, on a real server: the frames a
stream's state allows, stream identifiers, concurrency, dependencies, error handling, extending
the protocol. Each error is the RFC's code; after a stream error the connection still serves a
call; after a connection error the server sent GOAWAY and closed, and serves a new connection.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.integration.h2client import raw_frame
from tests.rfc.h2_support import (
    CONTINUATION,
    DATA,
    END_HEADERS,
    END_STREAM,
    GOAWAY,
    HEADERS,
    PRIORITY,
    PRIORITY_FLAG,
    PROTOCOL_ERROR,
    REFUSED_STREAM,
    RST_STREAM,
    SETTINGS,
    STREAM_CLOSED,
    WINDOW_UPDATE,
    RawH2,
    h2_server,
    infer_message,
    request_fields,
    settings_payload,
    u32,
)
from tests.serverproc import ServerProcess

CANCEL = 8


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    yield from h2_server(tmp_path_factory, "rfc9113_streams")


# -- 5.1 stream states: idle ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "payload"),
    [(DATA, b"x"), (RST_STREAM, u32(CANCEL)), (WINDOW_UPDATE, u32(1)), (CONTINUATION, b"")],
    ids=["DATA", "RST_STREAM", "WINDOW_UPDATE", "CONTINUATION"],
)
def test_frame_on_an_idle_stream_is_a_connection_error(c: RawH2, kind: int, payload: bytes) -> None:
    """5.1 idle: "Receiving any frame other than HEADERS or PRIORITY on a stream in this state
    MUST be treated as a connection error of type PROTOCOL_ERROR"."""
    flags = END_HEADERS if kind == CONTINUATION else 0
    c.frame(kind, flags, 1, payload)
    c.expect_goaway(PROTOCOL_ERROR)


def test_priority_on_an_idle_stream_is_allowed(c: RawH2) -> None:
    """5.1 idle: PRIORITY may be received on an idle stream (it is no error)."""
    c.frame(PRIORITY, 0, 9, u32(0) + b"\x10")
    c.sync()
    c.serves()  # stream 1: an id below 9 that PRIORITY did not open


# -- 5.1 half-closed (remote) -----------------------------------------------------------------


def slow_call(c: RawH2) -> int:
    """A call the model works on for a while: its stream is half-closed (remote)."""
    return c.request(body=infer_message(sleep=2.0))


def test_data_on_a_half_closed_remote_stream_is_stream_closed(c: RawH2) -> None:
    """5.1 half-closed (remote): "If an endpoint receives additional frames, other than
    WINDOW_UPDATE, PRIORITY, or RST_STREAM, for a stream that is in this state, it MUST respond
    with a stream error of type STREAM_CLOSED"."""
    stream_id = slow_call(c)
    c.frame(DATA, 0, stream_id, b"more")
    c.expect_reset(stream_id, STREAM_CLOSED)


def test_headers_on_a_half_closed_remote_stream_is_stream_closed(c: RawH2) -> None:
    """5.1 half-closed (remote), as above, with HEADERS (trailers after the end)."""
    stream_id = slow_call(c)
    c.headers([("x-late", "1")], stream_id=stream_id, end_stream=True)
    c.expect_reset(stream_id, STREAM_CLOSED)


def test_window_update_priority_and_reset_on_a_half_closed_remote_stream(c: RawH2) -> None:
    """5.1 half-closed (remote): WINDOW_UPDATE, PRIORITY and RST_STREAM are allowed there."""
    stream_id = slow_call(c)
    c.frame(WINDOW_UPDATE, 0, stream_id, u32(1000))
    c.frame(PRIORITY, 0, stream_id, u32(0) + b"\x10")
    c.frame(RST_STREAM, 0, stream_id, u32(CANCEL))
    c.sync()
    assert not c.goaways(), c.seen()
    assert not c.resets(stream_id), c.seen()
    c.serves()


# -- 5.1 closed ---------------------------------------------------------------------------------


def test_data_after_the_client_reset_the_stream_is_a_stream_error(c: RawH2) -> None:
    """5.1 closed: "An endpoint that receives any frame other than PRIORITY after receiving a
    RST_STREAM MUST treat that as a stream error of type STREAM_CLOSED"."""
    stream_id = c.headers(request_fields())
    c.frame(RST_STREAM, 0, stream_id, u32(CANCEL))
    c.frame(DATA, 0, stream_id, b"late")
    c.expect_reset(stream_id, STREAM_CLOSED)


def test_headers_after_the_client_reset_the_stream_is_a_stream_error(c: RawH2) -> None:
    """5.1 closed, as above, with HEADERS; the block is still decoded (4.3)."""
    stream_id = c.headers(request_fields())
    c.frame(RST_STREAM, 0, stream_id, u32(CANCEL))
    c.headers([("x-late", "1")], stream_id=stream_id, end_stream=True)
    c.expect_reset(stream_id, STREAM_CLOSED)


def test_priority_after_the_client_reset_the_stream_is_allowed(c: RawH2) -> None:
    """5.1 closed: PRIORITY is the one frame allowed after a RST_STREAM."""
    stream_id = c.headers(request_fields())
    c.frame(RST_STREAM, 0, stream_id, u32(CANCEL))
    c.frame(PRIORITY, 0, stream_id, u32(0) + b"\x10")
    c.sync()
    assert not c.goaways(), c.seen()
    assert not c.resets(stream_id), c.seen()


@pytest.mark.parametrize("kind", [DATA, HEADERS], ids=["DATA", "HEADERS"])
def test_frame_after_the_stream_ended_is_a_connection_error(c: RawH2, kind: int) -> None:
    """5.1 closed: "an endpoint that receives any frames after receiving a frame with the
    END_STREAM flag set MUST treat that as a connection error of type STREAM_CLOSED"."""
    stream_id = c.request()
    c.ended(stream_id)
    if kind == DATA:
        c.frame(DATA, END_STREAM, stream_id, b"late")
    else:
        c.headers([("x-late", "1")], stream_id=stream_id, end_stream=True)
    c.expect_goaway(STREAM_CLOSED)


def test_window_update_and_reset_on_a_closed_stream_are_allowed(c: RawH2) -> None:
    """5.1 closed: WINDOW_UPDATE or RST_STREAM may arrive for a short while after the end; they
    are no error."""
    stream_id = c.request()
    c.ended(stream_id)
    c.frame(WINDOW_UPDATE, 0, stream_id, u32(100))
    c.frame(RST_STREAM, 0, stream_id, u32(CANCEL))
    c.sync()
    assert not c.goaways(), c.seen()
    c.serves()


def test_late_data_on_a_stream_the_server_reset_is_ignored(c: RawH2) -> None:
    """5.1 closed: "An endpoint MUST ignore frames that it receives on closed streams after it
    has sent a RST_STREAM frame" (here the server resets a malformed request)."""
    stream_id = c.headers([*request_fields(), ("connection", "close")])
    c.wait(lambda f: f.kind == RST_STREAM and f.stream_id == stream_id)
    c.frame(DATA, END_STREAM, stream_id, infer_message())
    c.sync()
    assert c.resets(stream_id) == [PROTOCOL_ERROR], c.seen()
    assert not c.goaways(), c.seen()
    c.serves()


# -- 5.1.1 stream identifiers -----------------------------------------------------------------


def test_even_stream_id_from_a_client_is_a_connection_error(c: RawH2) -> None:
    """5.1.1: "Streams initiated by a client MUST use odd-numbered stream identifiers"; "An
    endpoint that receives an unexpected stream identifier MUST respond with a connection error
    of type PROTOCOL_ERROR"."""
    c.headers(request_fields(), stream_id=2)
    c.expect_goaway(PROTOCOL_ERROR)


def test_stream_id_below_one_already_used_is_a_connection_error(c: RawH2) -> None:
    """5.1.1: "The identifier of a newly established stream MUST be numerically greater than all
    streams that the initiating endpoint has opened": stream 5, then 3 (never opened)."""
    first = c.headers(request_fields(), stream_id=5)
    c.frame(DATA, END_STREAM, first, infer_message())
    c.ended(first)
    c.headers(request_fields(), stream_id=3, end_stream=True)
    c.expect_goaway(PROTOCOL_ERROR)


# -- 5.1.2 stream concurrency -----------------------------------------------------------------


def test_streams_beyond_the_advertised_limit_are_refused(c: RawH2) -> None:
    """5.1.2: "An endpoint that receives a HEADERS frame that causes its advertised concurrent
    stream limit to be exceeded MUST treat this as a stream error of type PROTOCOL_ERROR or
    REFUSED_STREAM"."""
    settings = c.wait(lambda f: f.kind == SETTINGS and not f.flags & 1)
    limits = {
        int.from_bytes(settings.payload[i : i + 2], "big"): int.from_bytes(
            settings.payload[i + 2 : i + 6], "big"
        )
        for i in range(0, len(settings.payload), 6)
    }
    limit = limits[3]  # SETTINGS_MAX_CONCURRENT_STREAMS
    assert 100 <= limit <= 4096, limits
    block = c.block(request_fields())  # sent again and again: all indexed after the first
    ids = [c.new_stream() for _ in range(limit + 1)]
    c.send(b"".join(raw_frame(HEADERS, END_HEADERS, stream_id, block) for stream_id in ids))
    refused = c.wait(lambda f: f.kind == RST_STREAM)
    assert (refused.stream_id, refused.payload) == (ids[-1], u32(REFUSED_STREAM)), c.seen()[-3:]
    c.sync()
    assert [f for f in c.frames if f.kind in (RST_STREAM, GOAWAY)] == [refused]


# -- 5.3.1 stream dependencies --------------------------------------------------------------------


def test_headers_depending_on_itself_is_a_stream_error(c: RawH2) -> None:
    """5.3.1: "A stream cannot depend on itself. An endpoint MUST treat this as a stream error of
    type PROTOCOL_ERROR"; the header block is still decoded (the next call indexes it)."""
    stream_id = c.new_stream()
    priority = u32(stream_id) + b"\x10"
    block = c.block([*request_fields(), ("x-marker", "indexed-by-the-next-call")])
    c.frame(HEADERS, END_HEADERS | END_STREAM | PRIORITY_FLAG, stream_id, priority + block)
    c.expect_reset(stream_id, PROTOCOL_ERROR)


def test_priority_depending_on_itself_is_a_stream_error(c: RawH2) -> None:
    """5.3.1, with a PRIORITY frame on an open stream: that stream is reset."""
    stream_id = c.headers(request_fields())
    c.frame(PRIORITY, 0, stream_id, u32(stream_id) + b"\x10")
    c.expect_reset(stream_id, PROTOCOL_ERROR)


# -- 5.4.1 connection error handling --------------------------------------------------------------


def test_a_connection_error_sends_goaway_then_closes(c: RawH2) -> None:
    """5.4.1: "After sending the GOAWAY frame for an error condition, the endpoint MUST close
    the TCP connection"; the GOAWAY names the last stream the server handled."""
    stream_id = c.request()
    c.ended(stream_id)
    c.frame(SETTINGS, 0, 1, b"")  # SETTINGS on a stream: PROTOCOL_ERROR (6.5)
    debug = c.expect_goaway(PROTOCOL_ERROR)
    goaway = c.goaways()[0]
    assert int.from_bytes(goaway.payload[:4], "big") == stream_id
    assert "SETTINGS" in debug


# -- 5.5 extending HTTP/2 ---------------------------------------------------------------------


def test_unknown_frame_type_is_ignored(c: RawH2) -> None:
    """5.5: "Implementations MUST ignore unknown or unsupported values in all extensible
    protocol elements" (also 4.1: unknown frame types are ignored)."""
    c.frame(0xEE, 0xFF, 0, b"extension")
    c.frame(0xEE, 0, 1, b"on an idle stream")
    c.serves()


def test_unknown_setting_is_ignored(c: RawH2) -> None:
    """5.5 and 6.5.2: "An endpoint that receives a SETTINGS frame with any unknown or
    unsupported identifier MUST ignore that setting"."""
    c.frame(SETTINGS, 0, 0, settings_payload([(0xFF, 7)]))
    c.wait(lambda f: f.kind == SETTINGS and bool(f.flags & 1) and f.payload == b"")
    c.serves()


def test_unknown_frame_inside_a_header_block_is_a_connection_error(c: RawH2) -> None:
    """5.5: "Extension frames that appear in the middle of a field block are not permitted;
    these MUST be treated as a connection error of type PROTOCOL_ERROR"."""
    block = c.block(request_fields())
    c.frame(HEADERS, 0, 1, block[:5])
    c.frame(0xEE, 0, 0, b"")
    c.frame(CONTINUATION, END_HEADERS, 1, block[5:])
    c.expect_goaway(PROTOCOL_ERROR)


def test_goaway_from_the_client_is_not_answered_by_closing_streams(c: RawH2) -> None:
    """6.8 with 5.1: a GOAWAY from the client (NO_ERROR, stream 0) is no error; streams it
    started before are answered."""
    stream_id = c.request()
    c.frame(GOAWAY, 0, 0, u32(0) + u32(0))
    c.assert_ok(stream_id)
