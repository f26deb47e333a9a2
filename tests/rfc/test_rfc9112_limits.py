"""RFC 9112 limits and timing against a real server started with small limits and short
timeouts: a request head is bounded while it arrives (§3: 414, RFC 6585 §5: 431), slow heads,
stalled bodies and bodies dripped slowly time out (408) while other clients are served, and a
client that does not read its answers is no longer read, so the server's memory stays bounded
and it keeps serving others.
"""

from __future__ import annotations

import select
import socket
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.rfc.h1client import (
    INFER,
    INFER_PATH,
    Answer,
    Client,
    get,
    post,
    slow_infer,
    small_repo,
    vm_rss_kib,
)
from tests.serverproc import ServerProcess, served, start_server

MAX_LINE, MAX_HEADER = 2048, 8192
MIN_RATE = 20  # bytes a second a body must average past the body timeout (1 s)
BULK = 300 * 1024  # a body this large is read into a buffer of its own (h1.BULK_MIN_BYTES)
READY = b"/v2/health/ready"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    repo = small_repo(tmp_path_factory.mktemp("rfc9112_limits"))
    flags = ["--header-timeout", "1", "--body-timeout", "1", "--body-min-rate", str(MIN_RATE)]
    flags += ["--max-request-line", str(MAX_LINE), "--max-header-size", str(MAX_HEADER)]
    yield from served(start_server(repo, *flags))


def send_until_answered(c: Client, pieces: Iterator[bytes], pause: float = 0.0) -> None:
    """Send ``pieces`` until the server answers (or stops reading), at most 30 s."""
    deadline = time.monotonic() + 30
    for piece in pieces:
        assert time.monotonic() < deadline, "the server never answered"
        readable, _, _ = select.select([c.sock], [], [], pause)
        if readable:
            return
        try:
            c.sock.sendall(piece)
        except OSError:  # closed by the server after its answer
            return


def endless(piece: bytes, count: int = 100_000) -> Iterator[bytes]:
    return iter([piece] * count)


# -- §3 request line, RFC 6585 §5 header fields: bounded while they arrive --------------------


@pytest.mark.parametrize("piece", [64, 4096, 1 << 20])
def test_3_a_request_target_past_the_limit_is_414_before_its_end(
    server: ServerProcess, piece: int
) -> None:
    with Client(server) as c:
        c.send(b"GET /")
        send_until_answered(c, endless(b"a" * piece))
        answer = c.answer()
        assert answer.status == 414
        assert b"--max-request-line" in answer.body
        assert answer.header("connection") == "close"
        assert c.closed()


def test_3_a_request_target_within_the_limit_is_served(server: ServerProcess) -> None:
    with Client(server) as c:
        c.send(get(b"/v2/models/" + b"a" * (MAX_LINE - 100)))
        assert c.answer().status == 404


@pytest.mark.parametrize("piece", [64, 4096, 1 << 20])
def test_5_a_header_value_past_the_limit_is_431_before_its_end(
    server: ServerProcess, piece: int
) -> None:
    with Client(server) as c:
        c.send(b"GET /v2/health/ready HTTP/1.1\r\nHost: t\r\nX-Long: ")
        send_until_answered(c, endless(b"v" * piece))
        answer = c.answer()
        assert answer.status == 431
        assert b"--max-header-size" in answer.body
        assert c.closed()


def test_5_a_header_name_past_the_limit_is_431(server: ServerProcess) -> None:
    with Client(server) as c:
        c.send(b"GET /v2/health/ready HTTP/1.1\r\nHost: t\r\nX")
        send_until_answered(c, endless(b"n" * 1024))
        assert c.answer().status == 431


def test_5_many_header_fields_past_the_limit_are_431(server: ServerProcess) -> None:
    fields = b"".join(b"X-%d: %s\r\n" % (i, b"v" * 50) for i in range(MAX_HEADER // 50))
    with Client(server) as c:
        c.send(b"GET /v2/health/ready HTTP/1.1\r\nHost: t\r\n" + fields + b"\r\n")
        assert c.answer().status == 431
        assert c.closed()


def test_5_header_fields_within_the_limit_are_served(server: ServerProcess) -> None:
    fields = b"".join(b"X-%d: %s\r\n" % (i, b"v" * 50) for i in range(MAX_HEADER // 120))
    with Client(server) as c:
        c.send(get(READY, fields))
        assert c.answer().status == 200


def test_3_24_mib_of_request_line_leaves_the_server_as_it_was(server: ServerProcess) -> None:
    before = vm_rss_kib(server.proc.pid)
    with Client(server) as c:
        c.send(b"GET /")
        send_until_answered(c, endless(b"a" * (1 << 20), 24))
        assert c.answer().status == 414
    with Client(server) as c:
        c.send(b"GET / HTTP/1.1\r\nHost: t\r\nX: ")
        send_until_answered(c, endless(b"v" * (1 << 20), 24))
        assert c.answer().status == 431
    assert vm_rss_kib(server.proc.pid) - before < 10 * 1024


# -- slow clients: 408 ----------------------------------------------------------------------


def test_9_5_a_head_that_stops_arriving_is_408(server: ServerProcess) -> None:
    with Client(server) as c:
        c.send(b"GET /v2/health/ready HTTP/1.1\r\nHost: t\r\n")
        answer = c.answer()
        assert answer.status == 408
        assert b"--header-timeout" in answer.body
        assert c.closed()


@pytest.mark.parametrize(
    ("start", "byte"),
    [(b"GET /v2/health/re", b"a"), (b"GET / HTTP/1.1\r\nX: ", b"a"), (b"", b"\r\n")],
    ids=["target", "header", "empty-lines"],
)
def test_9_5_a_head_dribbled_a_byte_at_a_time_is_408(
    server: ServerProcess, start: bytes, byte: bytes
) -> None:
    """Bytes that keep arriving do not keep a head that never ends alive."""
    with Client(server) as c:
        c.send(start)
        send_until_answered(c, endless(byte, 300), pause=0.1)
        assert c.answer().status == 408
        assert c.closed()


def test_9_5_a_body_that_stalls_is_408(server: ServerProcess) -> None:
    with Client(server) as c:
        c.send(b"POST %s HTTP/1.1\r\nHost: t\r\nContent-Length: 100\r\n\r\n{" % INFER_PATH)
        answer = c.answer()
        assert answer.status == 408
        assert b"--body-timeout" in answer.body
        assert c.closed()


def test_9_5_a_chunked_body_that_stalls_is_408(server: ServerProcess) -> None:
    with Client(server) as c:
        c.send(
            b"POST %s HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nab" % INFER_PATH
        )
        assert c.answer().status == 408


def test_9_5_a_body_that_keeps_arriving_is_not_cut(server: ServerProcess) -> None:
    """Ten pieces, each well within the body timeout, together more than twice as long."""
    head = b"POST %s HTTP/1.1\r\nHost: t\r\nContent-Length: %d\r\n\r\n" % (INFER_PATH, len(INFER))
    step = -(-len(INFER) // 10)
    with Client(server) as c:
        c.send(head)
        for start in range(0, len(INFER), step):
            time.sleep(0.25)
            c.send(INFER[start : start + step])
        assert c.answer().status == 200


def infer_alone(server: ServerProcess) -> tuple[int, str | None, bytes]:
    """A normal client's inference, on a connection of its own: what it is answered."""
    with Client(server) as c:
        c.send(post(INFER_PATH, INFER))
        answer = c.answer()
        return answer.status, answer.header("content-type"), answer.body


def drip(server: ServerProcess, head: bytes, piece: bytes) -> Answer:
    """``head``, then ``piece`` every fifth of a second (a body byte each: 5 a second, below
    MIN_RATE) until the server answers; the connection is closed after the answer."""
    with Client(server) as c:
        c.send(head)
        send_until_answered(c, endless(piece, 300), pause=0.2)
        answer = c.answer()
        assert c.closed()
        return answer


def post_head(length: int | None) -> bytes:
    framing = b"Content-Length: %d" % length if length else b"Transfer-Encoding: chunked"
    return b"POST %s HTTP/1.1\r\nHost: t\r\n%s\r\n\r\n" % (INFER_PATH, framing)


@pytest.mark.parametrize(
    ("length", "piece"),
    [(1000, b" "), (BULK, b" "), (None, b"1\r\n \r\n")],
    ids=["content-length", "own-buffer", "chunked"],
)
def test_9_5_a_body_dripped_slowly_is_408_while_others_are_served(
    server: ServerProcess, length: int | None, piece: bytes
) -> None:
    """Bytes that keep arriving too slowly do not keep a body alive (it is never stalled: a
    byte comes every fifth of a second); clients on other connections are answered meanwhile
    exactly as they are alone, before the dripping one is cut."""
    alone = infer_alone(server)
    beside: list[tuple[tuple[int, str | None, bytes], bool]] = []
    with ThreadPoolExecutor(1) as pool:
        cut = pool.submit(drip, server, post_head(length), piece)
        while not beside or not cut.done():
            beside.append((infer_alone(server), cut.done()))
            time.sleep(0.05)
        answer = cut.result()
    assert answer.status == 408
    assert b"--body-min-rate" in answer.body
    assert answer.header("connection") == "close"
    assert all(seen == alone for seen, _ in beside), beside
    assert any(not cut_yet for _, cut_yet in beside), "no answer before the drip was cut"


@pytest.mark.parametrize("size", [4096, BULK], ids=["parsed", "own-buffer"])
def test_9_5_a_large_body_slow_but_above_the_min_rate_is_served(
    server: ServerProcess, size: int
) -> None:
    """Twenty pieces a tenth of a second apart: longer than the body timeout, each piece
    buying far more time (size / 20 / MIN_RATE seconds) than the wait before the next."""
    alone = infer_alone(server)
    body = INFER + b" " * (size - len(INFER))
    step = size // 20
    with Client(server) as c:
        c.send(post_head(size))
        for start in range(0, size, step):
            time.sleep(0.1)
            c.send(body[start : start + step])
        answer = c.answer()
    assert (answer.status, answer.header("content-type"), answer.body) == alone


def test_9_5_a_request_computed_longer_than_the_timeouts_is_answered(
    server: ServerProcess,
) -> None:
    with Client(server) as c:
        c.send(slow_infer(2.5) + get(READY))
        assert c.answer().status == 200
        assert c.answer().status == 200


# -- a client that does not read -------------------------------------------------------------


def pipeline_without_reading(
    server: ServerProcess, request: bytes, count: int
) -> tuple[socket.socket, int]:
    """Send up to ``count`` requests and read nothing; returns the socket and how many were
    sent whole (the server stops reading: the rest is not sent)."""
    host, port = server.http_hostport.rsplit(":", 1)
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect((host, int(port)))
    sock.setblocking(False)
    data = memoryview(request * count)
    sent, stuck_since = 0, time.monotonic()
    while sent < len(data) and time.monotonic() - stuck_since < 2.0:
        _, writable, _ = select.select([], [sock], [], 0.2)
        if writable:
            try:
                n = sock.send(data[sent : sent + 65536])
            except BlockingIOError:
                n = 0
            if n:
                sent, stuck_since = sent + n, time.monotonic()
    return sock, sent // len(request)


@pytest.mark.parametrize(
    "request_bytes",
    [get(READY), post(INFER_PATH, INFER)],
    ids=["answered-at-once", "answered-by-a-task"],
)
def test_9_3_2_a_client_that_reads_nothing_holds_bounded_memory(
    server: ServerProcess, request_bytes: bytes
) -> None:
    before = vm_rss_kib(server.proc.pid)
    sock, whole = pipeline_without_reading(server, request_bytes, 400_000)
    try:
        grown = vm_rss_kib(server.proc.pid) - before
        assert grown < 30 * 1024, f"the server grew by {grown} KiB"
        assert whole < 400_000, "the server read every request of a client reading nothing"
        with Client(server) as other:  # the others are served meanwhile
            other.send(post(INFER_PATH, INFER))
            assert other.answer().status == 200
        sock.setblocking(True)
        sock.settimeout(20)
        reader = Client.__new__(Client)
        reader.sock, reader.buffer, reader.eof = sock, b"", False
        for _ in range(whole):  # once it reads, every request it sent whole is answered
            assert reader.answer().status == 200
    finally:
        sock.close()


def test_9_3_2_the_server_keeps_serving_while_a_client_reads_nothing(
    server: ServerProcess,
) -> None:
    stop = threading.Event()
    socks: list[socket.socket] = []

    def hog() -> None:
        while not stop.is_set() and len(socks) < 4:
            socks.append(pipeline_without_reading(server, get(READY), 20_000)[0])

    thread = threading.Thread(target=hog)
    thread.start()
    try:
        for _ in range(20):
            with Client(server) as c:
                c.send(get(READY))
                assert c.answer().status == 200
    finally:
        stop.set()
        thread.join(timeout=60)
        for sock in socks:
            sock.close()
