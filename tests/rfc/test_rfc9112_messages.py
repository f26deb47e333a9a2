"""RFC 9112 (HTTP/1.1) and RFC 9110 §9 against a real server: one answer per request, in order;
HEAD; methods; versions; Host; HTTP/1.0; Upgrade and CONNECT. Raw sockets, bytes as written.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from tests.rfc.h1client import INFER, INFER_PATH, Client, get, post, slow_infer, small_repo
from tests.serverproc import ServerProcess, served, start_server

READY = b"/v2/health/ready"
STREAM = b"/grps/v1/infer/predict?streaming=true&model=words_stream_python"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    repo = small_repo(tmp_path_factory.mktemp("rfc9112_messages"))
    yield from served(start_server(repo))


def outputs(body: bytes) -> list[float]:
    return list(json.loads(body)["outputs"][0]["data"])


# -- §9.3 persistence, §9.3.2 pipelining: one answer per request, in order ----------------------


def test_9_3_2_pipelined_requests_are_answered_in_order(server: ServerProcess) -> None:
    with Client(server) as c:
        c.send(post(INFER_PATH, INFER) + get(READY) + slow_infer(0.2) + get(b"/v2/models/nope"))
        assert outputs(c.answer().body) == [2.5, 3.0]
        assert c.answer().status == 200
        assert outputs(c.answer().body) == [7.0]
        assert c.answer().status == 404
        c.send(get(READY, b"Connection: close\r\n"))
        assert c.answer().header("connection") == "close"
        assert c.closed()


def test_9_3_2_a_parser_error_waits_for_the_answer_still_computed_before_it(
    server: ServerProcess,
) -> None:
    """The later request cannot be parsed (an unknown method); the earlier one is answered
    first, then the error, then the close."""
    with Client(server) as c:
        c.send(slow_infer(0.5) + b"FROB / HTTP/1.1\r\nHost: t\r\n\r\n")
        first = c.answer()
        assert first.status == 200
        assert outputs(first.body) == [7.0]
        error = c.answer()
        assert error.status == 501
        assert error.header("connection") == "close"
        assert c.closed()


@pytest.mark.parametrize(
    "later",
    [
        b"GET / HTTP/1.1\r\nHost: t\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
        b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03",
        b"GET /" + b"a" * 20000 + b" HTTP/1.1\r\n",
        b"GET / HTTP/2.0\r\nHost: t\r\n\r\n",
    ],
    ids=["duplicate-length", "tls-hello", "long-target", "http2"],
)
def test_9_3_2_a_refused_request_never_overtakes_an_earlier_answer(
    server: ServerProcess, later: bytes
) -> None:
    with Client(server) as c:
        c.send(slow_infer(0.3) + later)
        assert outputs(c.answer().body) == [7.0]
        refused = c.answer()
        assert 400 <= refused.status < 600
        assert refused.header("connection") == "close"
        assert c.closed()


def test_9_6_a_request_after_connection_close_gets_no_answer(server: ServerProcess) -> None:
    with Client(server) as c:
        c.send(get(READY, b"Connection: close\r\n") + get(READY))
        assert c.answer().status == 200
        assert c.closed()


# -- RFC 9110 §9.3.2 HEAD -----------------------------------------------------------------------

GET_ROUTES = [
    b"/v2/health/ready",
    b"/v2/health/live",
    b"/v2",
    b"/v2/models/half_plus_two",
    b"/v2/models/half_plus_two/ready",
    b"/v1/models/half_plus_two",
    b"/v1/models/half_plus_two/metadata",
]


@pytest.mark.parametrize("path", GET_ROUTES)
def test_9110_9_3_2_head_is_get_without_the_body(server: ServerProcess, path: bytes) -> None:
    with Client(server) as c:
        c.send(get(path) + get(path, method=b"HEAD") + get(READY))
        whole = c.answer()
        bare = c.answer(b"HEAD")
        assert whole.status == bare.status == 200
        assert bare.header("content-length") == str(len(whole.body))
        assert bare.header("content-type") == whole.header("content-type")
        after = c.answer()  # a body after the HEAD answer would be read as this
        assert after.status == 200
        assert after.body == whole.body if path == READY else True


@pytest.mark.parametrize(
    ("path", "status"),
    [(b"/v2/nothing-here", 404), (INFER_PATH, 405), (b"/v2/models/nope/ready", 404)],
)
def test_9110_9_3_2_no_body_on_a_head_answer_of_any_status(
    server: ServerProcess, path: bytes, status: int
) -> None:
    with Client(server) as c:
        c.send(get(path, method=b"HEAD") + get(READY))
        bare = c.answer(b"HEAD")
        assert bare.status == status
        assert c.answer().status == 200


def test_9110_9_3_2_head_of_a_streamed_answer_has_no_chunks(server: ServerProcess) -> None:
    body = b'{"str_data": "a b"}'
    request = b"HEAD %s HTTP/1.1\r\nHost: t\r\nContent-Length: %d\r\n\r\n%s" % (
        STREAM,
        len(body),
        body,
    )
    with Client(server) as c:
        c.send(request + get(READY))
        assert c.answer(b"HEAD").status in (200, 405)
        assert c.answer().status == 200


def test_9110_15_5_6_allow_names_head_with_get(server: ServerProcess) -> None:
    with Client(server) as c:
        c.send(get(READY, method=b"DELETE"))
        answer = c.answer()
        assert answer.status == 405
        assert answer.header("allow") == "GET, HEAD"


# -- RFC 9110 §9.1 methods ----------------------------------------------------------------------


@pytest.mark.parametrize("method", [b"FROB", b"get", b"PROPFIND", b"TRACE", b"BREW"])
def test_9110_9_1_an_unknown_method_is_501(server: ServerProcess, method: bytes) -> None:
    with Client(server) as c:
        c.send(b"%s /v2/health/ready HTTP/1.1\r\nHost: t\r\n\r\n" % method)
        assert c.answer().status == 501


def test_9110_9_1_a_request_line_that_is_no_request_line_is_400(server: ServerProcess) -> None:
    with Client(server) as c:
        c.send(b"\x00\x01garbage\r\n\r\n")
        answer = c.answer()
        assert answer.status == 400
        assert answer.header("connection") == "close"
        assert c.closed()


# -- §2.3 versions ------------------------------------------------------------------------------


@pytest.mark.parametrize("version", [b"HTTP/2.0", b"HTTP/3.0", b"HTTP/2.1"])
def test_2_3_a_major_version_other_than_1_is_505(server: ServerProcess, version: bytes) -> None:
    with Client(server) as c:
        c.send(b"GET /v2/health/ready %s\r\nHost: t\r\n\r\n" % version)
        answer = c.answer()
        assert answer.status == 505
        assert c.closed()


def test_2_3_the_http2_preface_is_505(server: ServerProcess) -> None:
    with Client(server) as c:
        c.send(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
        assert c.answer().status == 505


@pytest.mark.parametrize("version", [b"HTTP/1.2", b"HTTP/1.9"])
def test_2_3_a_later_minor_version_is_served_as_1_1(server: ServerProcess, version: bytes) -> None:
    with Client(server) as c:
        c.send(post(INFER_PATH, INFER, version=version) + get(READY))
        first = c.answer()
        assert first.status == 200
        assert first.version == b"HTTP/1.1"
        assert outputs(first.body) == [2.5, 3.0]
        assert first.header("connection") is None  # kept alive, as 1.1
        assert c.answer().status == 200


# -- §3.2 Host ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "host_lines",
    [b"", b"Host: a\r\nHost: b\r\n", b"Host: a b\r\n", b"Host: a/b\r\n", b"Host: u@a\r\n"],
    ids=["missing", "twice", "space", "slash", "userinfo"],
)
def test_3_2_a_missing_repeated_or_invalid_host_is_400(
    server: ServerProcess, host_lines: bytes
) -> None:
    with Client(server) as c:
        c.send(b"GET /v2/health/ready HTTP/1.1\r\n%s\r\n" % host_lines)
        answer = c.answer()
        assert answer.status == 400
        assert "Host" in json.loads(answer.body)["error"]
        assert c.closed()


@pytest.mark.parametrize("host", [b"", b"127.0.0.1:8000", b"[::1]:80", b"example.com"])
def test_3_2_a_valid_or_empty_host_is_served(server: ServerProcess, host: bytes) -> None:
    with Client(server) as c:
        c.send(b"GET /v2/health/ready HTTP/1.1\r\nHost: %s\r\n\r\n" % host)
        assert c.answer().status == 200


# -- HTTP/1.0 (§9.3, §6.1, §7, RFC 9110 §10.1.1) -------------------------------------------------


def test_9_3_http_1_0_without_keep_alive_is_closed_after_its_answer(server: ServerProcess) -> None:
    with Client(server) as c:
        c.send(b"GET /v2/health/ready HTTP/1.0\r\n\r\n")
        assert c.answer().status == 200
        assert c.closed()


def test_9_3_http_1_0_keep_alive_is_said_and_kept(server: ServerProcess) -> None:
    with Client(server) as c:
        c.send(b"GET /v2/health/ready HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
        first = c.answer()
        assert first.status == 200
        assert first.header("connection") == "keep-alive"
        c.send(post(INFER_PATH, INFER, b"Connection: keep-alive\r\n", b"HTTP/1.0"))
        assert outputs(c.answer().body) == [2.5, 3.0]


def test_6_1_http_1_0_with_transfer_encoding_is_400_and_closed(server: ServerProcess) -> None:
    with Client(server) as c:
        c.send(
            b"POST /v2/models/half_plus_two/infer HTTP/1.0\r\nConnection: keep-alive\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n"
        )
        answer = c.answer()
        assert answer.status == 400
        assert c.closed()


def test_7_no_chunked_answer_to_http_1_0(server: ServerProcess) -> None:
    body = b'{"str_data": "one two three"}'
    with Client(server) as c:
        c.send(post(STREAM, body, version=b"HTTP/1.0"))
        answer = c.answer()
        assert answer.status == 200
        assert answer.header("transfer-encoding") is None
        assert answer.header("content-length") is None
        assert b"one" in answer.body
        assert b"three" in answer.body  # the close ended it
        assert c.closed()


def test_7_a_streamed_answer_to_http_1_1_is_chunked(server: ServerProcess) -> None:
    body = b'{"str_data": "one two three"}'
    with Client(server) as c:
        c.send(post(STREAM, body) + get(READY))
        answer = c.answer()
        assert answer.header("transfer-encoding") == "chunked"
        assert len(answer.chunks) >= 3
        assert c.answer().status == 200


def test_9110_10_1_1_no_100_continue_to_http_1_0(server: ServerProcess) -> None:
    """The interim answer would be the first this HTTP/1.0 client reads."""
    with Client(server) as c:
        c.send(post(INFER_PATH, INFER, b"Expect: 100-continue\r\n", b"HTTP/1.0"))
        answer = c.answer()
        assert answer.status == 200
        assert outputs(answer.body) == [2.5, 3.0]
        assert c.closed()


def test_9110_10_1_1_100_continue_to_http_1_1(server: ServerProcess) -> None:
    head = b"POST %s HTTP/1.1\r\nHost: t\r\nExpect: 100-continue\r\nContent-Length: %d\r\n\r\n" % (
        INFER_PATH,
        len(INFER),
    )
    with Client(server) as c:
        c.send(head)
        assert c.answer().status == 100
        c.send(INFER)
        assert outputs(c.answer().body) == [2.5, 3.0]


# -- RFC 9110 §7.8 Upgrade, §9.3.6 CONNECT: one answer each ---------------------------------------


def test_9110_7_8_upgrade_h2c_is_ignored_one_answer(server: ServerProcess) -> None:
    upgrade = (
        b"Connection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\n"
        b"HTTP2-Settings: AAMAAABkAAQAAP__\r\n"
    )
    with Client(server) as c:
        c.send(get(READY, upgrade) + get(READY, b"Connection: close\r\n"))
        first = c.answer()
        assert first.status == 200
        assert c.answer().status == 200
        assert c.closed()


def test_9110_7_8_upgrade_websocket_is_ignored_one_answer(server: ServerProcess) -> None:
    upgrade = (
        b"Connection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\n"
        b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
    )
    with Client(server) as c:
        c.send(get(READY, upgrade) + get(READY, b"Connection: close\r\n"))
        assert c.answer().status == 200
        assert c.answer().status == 200
        assert c.closed()


@pytest.mark.parametrize("split", [0, 10, 1])
def test_9110_7_8_a_post_with_upgrade_reaches_its_handler_with_its_body(
    server: ServerProcess, split: int
) -> None:
    request = post(INFER_PATH, INFER, b"Connection: upgrade\r\nUpgrade: foo\r\n")
    cut = len(request) - split if split else len(request)
    with Client(server) as c:
        c.send(request[:cut])
        c.send(request[cut:] + get(READY, b"Connection: close\r\n"))
        assert outputs(c.answer().body) == [2.5, 3.0]
        assert c.answer().status == 200
        assert c.closed()


def test_9110_7_8_upgrade_with_a_chunked_body_is_one_error(server: ServerProcess) -> None:
    with Client(server) as c:
        c.send(
            b"POST /v2/models/half_plus_two/infer HTTP/1.1\r\nHost: t\r\nConnection: upgrade\r\n"
            b"Upgrade: foo\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n"
        )
        assert c.answer().status == 400
        assert c.closed()


def test_9110_9_3_6_connect_is_one_answer_then_the_close(server: ServerProcess) -> None:
    with Client(server) as c:
        c.send(b"CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n\x16\x03\x01junk")
        assert c.answer().status == 501
        assert c.closed()


# -- §6 message body framing --------------------------------------------------------------------


@pytest.mark.parametrize(
    "head",
    [
        b"Content-Length: 3\r\nContent-Length: 4\r\n",
        b"Content-Length: 3\r\nTransfer-Encoding: chunked\r\n",
        b"Content-Length: abc\r\n",
        b"Transfer-Encoding: gzip\r\n",
    ],
    ids=["two-lengths", "length-and-chunked", "bad-length", "not-chunked-last"],
)
def test_6_3_an_ambiguous_body_length_is_400_and_closed(server: ServerProcess, head: bytes) -> None:
    with Client(server) as c:
        c.send(b"POST %s HTTP/1.1\r\nHost: t\r\n%s\r\nabc" % (INFER_PATH, head))
        answer = c.answer()
        assert answer.status == 400
        assert c.closed()


def test_7_1_a_chunked_request_body_is_read(server: ServerProcess) -> None:
    half = len(INFER) // 2
    chunks = b"%x\r\n%s\r\n%x\r\n%s\r\n0\r\n\r\n" % (
        half,
        INFER[:half],
        len(INFER) - half,
        INFER[half:],
    )
    with Client(server) as c:
        c.send(
            b"POST %s HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n%s"
            % (INFER_PATH, chunks)
        )
        assert outputs(c.answer().body) == [2.5, 3.0]


# -- §2.2, §5 message and field syntax ----------------------------------------------------------


@pytest.mark.parametrize(
    "head",
    [
        b"GET /v2/health/ready HTTP/1.1\r\nHost: t\r\nX: a\rb\r\n\r\n",
        b"GET /v2/health/ready HTTP/1.1\r\n Host: t\r\n\r\n",
        b"GET /v2/health/ready HTTP/1.1\r\nHost : t\r\n\r\n",
        b"GET /v2/health/ready HTTP/1.1\r\nHost: t\r\nX: a\r\n folded\r\n\r\n",
        b"GET /v2/health/ready HTTP/1.1\r\nHost: t\r\nX\x01Y: a\r\n\r\n",
        b"GET /v2/health/ready\x7f HTTP/1.1\r\nHost: t\r\n\r\n",
    ],
    ids=[
        "bare-cr",
        "space-before-first-field",
        "space-before-colon",
        "obs-fold",
        "ctl-name",
        "ctl-target",
    ],
)
def test_2_2_and_5_a_malformed_head_is_400_and_closed(server: ServerProcess, head: bytes) -> None:
    with Client(server) as c:
        c.send(head)
        answer = c.answer()
        assert answer.status == 400
        assert answer.header("connection") == "close"
        assert c.closed()


def test_2_2_an_empty_line_before_the_request_line_is_ignored(server: ServerProcess) -> None:
    with Client(server) as c:
        c.send(b"\r\n" + get(READY))
        assert c.answer().status == 200


def test_3_2_2_the_absolute_form_target_is_accepted(server: ServerProcess) -> None:
    with Client(server) as c:
        c.send(b"GET http://t/v2/health/ready HTTP/1.1\r\nHost: t\r\n\r\n")
        assert c.answer().status == 200


def test_7_1_1_chunk_extensions_are_ignored(server: ServerProcess) -> None:
    chunks = b"%x;name=value\r\n%s\r\n0\r\n\r\n" % (len(INFER), INFER)
    request = b"POST %s HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n" % INFER_PATH
    with Client(server) as c:
        c.send(request + chunks)
        assert outputs(c.answer().body) == [2.5, 3.0]


def test_7_1_2_a_trailer_section_is_read(server: ServerProcess) -> None:
    chunks = b"%x\r\n%s\r\n0\r\nX-Checksum: 1\r\n\r\n" % (len(INFER), INFER)
    request = b"POST %s HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n" % INFER_PATH
    with Client(server) as c:
        c.send(request + chunks + get(READY))
        assert outputs(c.answer().body) == [2.5, 3.0]
        assert c.answer().status == 200


def test_7_1_an_invalid_chunk_size_is_400_and_closed(server: ServerProcess) -> None:
    request = b"POST %s HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n" % INFER_PATH
    with Client(server) as c:
        c.send(request + b"zz\r\nabc\r\n0\r\n\r\n")
        assert c.answer().status == 400
        assert c.closed()
