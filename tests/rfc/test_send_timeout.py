"""The send timeout (``--send-timeout``): an answer a client takes none of is not kept forever.

RFC 9113 6.9 lets an HTTP/2 client leave a flow-control window shut, and the server waits; but
not without end: a stream whose answer moves no byte for the send timeout is reset
(RST_STREAM CANCEL), a connection whose window stays shut gets GOAWAY and is closed, and an
HTTP/1.1 client that reads none of its answers is disconnected. A reader that is slow but takes
something within each timeout keeps its stream, and the server serves other clients meanwhile.
"""

from __future__ import annotations

import select
import socket
import struct
import time
from collections.abc import Iterator

import pytest

from tests.rfc.h1client import get
from tests.rfc.h2_support import (
    CANCEL,
    DATA,
    END_STREAM,
    INITIAL_WINDOW_SIZE,
    NO_ERROR,
    RST_STREAM,
    SETTINGS,
    WINDOW_UPDATE,
    RawH2,
    h2_server,
    infer_message,
    request_fields,
    serves_new,
    settings_payload,
    u32,
)
from tests.serverproc import ServerProcess

SEND_TIMEOUT_S = 1.5
BOUND_S = SEND_TIMEOUT_S + 10.0  # the longest any wait below may take
TCP_CLOSE = 7  # tcpi_state of a connection reset or closed


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    yield from h2_server(tmp_path_factory, "send_timeout", "--send-timeout", str(SEND_TIMEOUT_S))


def call(c: RawH2, values: int) -> int:
    """A ModelInfer of ``values`` floats (its answer: as many, echoed); the stream's id."""
    stream_id = c.headers(request_fields())
    c.frame(DATA, END_STREAM, stream_id, infer_message(values=[1.0] * values))
    return stream_id


def test_a_stream_whose_window_stays_shut_is_reset(server: ServerProcess) -> None:
    """A stream window of 0 never opened: the answer's headers go, its DATA waits, then the
    stream is reset with CANCEL; the connection goes on, and another client is served while it
    waits."""
    with RawH2(server.grpc_address, settings=[(INITIAL_WINDOW_SIZE, 0)]) as c:
        stream_id = call(c, 2)
        c.wait(lambda f: f.stream_id == stream_id)  # its headers: the answer is waiting
        serves_new(server)
        reset = c.wait(lambda f: f.kind == RST_STREAM and f.stream_id == stream_id, BOUND_S)
        assert struct.unpack(">L", reset.payload)[0] == CANCEL, c.seen()
        assert stream_id not in c.data, c.seen()
        c.frame(SETTINGS, 0, 0, settings_payload([(INITIAL_WINDOW_SIZE, 65535)]))
        c.serves()


def test_a_connection_whose_window_stays_shut_is_closed(server: ServerProcess) -> None:
    """Streams windows wide open, the connection's 65,535 bytes used by an answer larger than
    that and never opened again: GOAWAY (NO_ERROR, saying why), then the close."""
    with RawH2(server.grpc_address, settings=[(INITIAL_WINDOW_SIZE, 1 << 24)]) as c:
        stream_id = call(c, 40_000)  # 160,000 bytes to answer
        c.wait(lambda f: f.kind == DATA and f.stream_id == stream_id)
        serves_new(server)
        c.wait_closed(BOUND_S)
        goaways = c.goaways()
        assert goaways, c.seen()
        assert struct.unpack(">L", goaways[0].payload[4:8])[0] == NO_ERROR, c.seen()
        assert b"send timeout" in goaways[0].payload[8:], c.seen()
        assert len(c.data[stream_id]) <= 65535, c.seen()
    serves_new(server)


def test_a_slow_reader_that_takes_something_is_not_cut(server: ServerProcess) -> None:
    """A stream window of 0 opened 600 bytes at a time, every fifth of a second: the answer
    takes longer than the send timeout, yet moves within each, and arrives whole."""
    with RawH2(server.grpc_address, settings=[(INITIAL_WINDOW_SIZE, 0)]) as c:
        stream_id = call(c, 2000)  # about 8,000 bytes to answer
        c.wait(lambda f: f.stream_id == stream_id)
        started = time.monotonic()
        ended = False
        while not ended:
            assert time.monotonic() - started < 60, f"never finished: {c.seen()}"
            c.frame(WINDOW_UPDATE, 0, stream_id, u32(600))
            c.frame(WINDOW_UPDATE, 0, 0, u32(600))
            time.sleep(0.2)  # the pace of a slow reader
            c.sync()
            ended = any(f.stream_id == stream_id and f.flags & END_STREAM for f in c.frames)
            assert not c.resets(stream_id), c.seen()
        assert time.monotonic() - started > SEND_TIMEOUT_S, "the test did not outlast the timeout"
        c.assert_ok(stream_id)


def test_an_http1_client_that_reads_nothing_is_disconnected(server: ServerProcess) -> None:
    """HTTP/1.1: pipelined requests and none of their answers read: once the answers waiting
    reach the high-water mark the client is no longer read, and after the send timeout without
    the client taking anything the connection is aborted."""
    host, port = server.http_hostport.rsplit(":", 1)
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.connect((host, int(port)))
        sock.setblocking(False)
        requests = get(b"/v2/health/ready") * 1000
        deadline = time.monotonic() + BOUND_S
        while sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 1)[0] != TCP_CLOSE:
            assert time.monotonic() < deadline, "the connection is still open"
            _, writable, _ = select.select([], [sock], [], 0.1)
            if writable:
                try:
                    sock.send(requests)
                except BlockingIOError:
                    pass
                except (ConnectionResetError, BrokenPipeError):
                    break
    serves_new(server)
