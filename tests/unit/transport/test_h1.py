"""The HTTP/1.1 server on a real loopback socket: keep-alive, pipelining, streaming, limits."""

from __future__ import annotations

import asyncio
import contextvars
import socket
from collections.abc import AsyncIterator
from typing import Any

from rosettaserve.core.share import SHARE
from rosettaserve.transport.h1 import BULK_MIN_BYTES, MAX_BLANK_BYTES, Connection, HttpServer
from rosettaserve.transport.h1_answers import MAX_OUT_PARTS
from rosettaserve.web.routing import HttpResponse

VAR: contextvars.ContextVar[str] = contextvars.ContextVar("test_h1_var", default="")


class EchoApp:
    async def respond(
        self, method: str, raw_url: bytes, headers: dict[str, str], body: bytes | bytearray
    ) -> HttpResponse:
        if raw_url == b"/context":  # set before its first wait, reset after it
            token = VAR.set("inside")
            await asyncio.sleep(0)
            seen = VAR.get()
            VAR.reset(token)
            return HttpResponse(200, seen.encode(), "text/plain")
        if raw_url == b"/prioritise":  # sets the request's priority, never resets it
            SHARE.set(SHARE.get().prioritised(7))
            await asyncio.sleep(0)  # (a task takes it over: the requests behind it follow there)
            return HttpResponse(200, b"set", "text/plain")
        if raw_url == b"/priority":
            return HttpResponse(200, str(SHARE.get().priority).encode(), "text/plain")
        if raw_url == b"/headers":
            fields = ";".join(f"{name}={value}" for name, value in sorted(headers.items()))
            return HttpResponse(200, fields.encode(), "text/plain")
        if raw_url == b"/type":
            return HttpResponse(200, type(body).__name__.encode(), "text/plain")
        if raw_url == b"/stream":
            return HttpResponse(200, content_type="text/plain", stream=self._chunks())
        return HttpResponse(200, method.encode() + b" " + raw_url + b" " + body, "text/plain")

    async def _chunks(self) -> AsyncIterator[bytes]:
        for word in (b"one", b"", b"two"):
            await asyncio.sleep(0)
            yield word


async def exchange(request: bytes, max_request_size: int = 1 << 20, pieces: int = 1) -> bytes:
    """Send ``request`` (in ``pieces`` writes with a pause between them), read to the close."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    sock.setblocking(False)
    server = HttpServer(EchoApp(), max_request_size)
    await server.start(sock)
    reader, writer = await asyncio.open_connection(*sock.getsockname())
    step = -(-len(request) // pieces)
    for start in range(0, len(request), step):
        writer.write(request[start : start + step])
        await writer.drain()
        if pieces > 1:
            await asyncio.sleep(0.01)
    data = await asyncio.wait_for(reader.read(), timeout=10)  # the server closes at the end
    writer.close()
    await server.shutdown(timeout=5)
    return data


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def test_pipelined_requests_are_answered_in_order() -> None:
    data = run(
        exchange(
            b"POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\nhi"
            b"GET /b HTTP/1.1\r\nHost: x\r\n\r\n"
            b"GET /c HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
        )
    )
    bodies = [part.split(b"\r\n\r\n", 1)[1] for part in data.split(b"HTTP/1.1 200 OK")[1:]]
    assert [b.split(b"HTTP")[0] for b in bodies] == [b"POST /a hi", b"GET /b ", b"GET /c "]
    assert data.count(b"connection: close") == 1


def test_a_pipelined_request_does_not_inherit_the_priority_of_the_one_before() -> None:
    data = run(
        exchange(
            b"GET /prioritise HTTP/1.1\r\nHost: x\r\n\r\n"
            b"GET /priority HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
        )
    )
    bodies = [part.split(b"\r\n\r\n", 1)[1] for part in data.split(b"HTTP/1.1 200 OK")[1:]]
    assert bodies == [b"set", b"0"]


def test_a_repeated_header_field_has_its_values_joined() -> None:
    """Also when the values are the same one-character or empty strings (one object each)."""
    data = run(
        exchange(
            b"GET /headers HTTP/1.1\r\nHost: x\r\nX-One: a\r\nX-Empty: \r\nx-one: a\r\n"
            b"X-Empty: \r\nX-Three: 1\r\nX-Three: 2\r\nX-Three: 3\r\nConnection: close\r\n\r\n"
        )
    )
    body = data.split(b"\r\n\r\n", 1)[1]
    assert body == b"connection=close;host=x;x-empty=, ;x-one=a, a;x-three=1, 2, 3"


def test_streaming_response_is_chunked() -> None:
    data = run(exchange(b"GET /stream HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"))
    head, body = data.split(b"\r\n\r\n", 1)
    assert b"transfer-encoding: chunked" in head
    assert b"content-length" not in head
    assert body == b"3\r\none\r\n3\r\ntwo\r\n0\r\n\r\n"


def test_chunked_request_body_is_read() -> None:
    data = run(
        exchange(
            b"POST /c HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n"
            b"\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n"
        )
    )
    assert data.endswith(b"POST /c abcde")


def test_body_over_the_limit_is_413_before_it_is_read() -> None:
    data = run(exchange(b"POST /big HTTP/1.1\r\nHost: x\r\nContent-Length: 5000\r\n\r\nxx", 100))
    assert data.startswith(b"HTTP/1.1 413 Request Entity Too Large")
    assert b"--max-request-size" in data
    assert b"connection: close" in data


def test_malformed_request_is_400_and_closed() -> None:
    data = run(exchange(b"NOT HTTP AT ALL\r\n\r\n"))
    assert data.startswith(b"HTTP/1.1 400 Bad Request")
    assert b"malformed HTTP request" in data


def test_expect_continue_is_answered() -> None:
    data = run(
        exchange(
            b"POST /e HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nExpect: 100-continue\r\n"
            b"Connection: close\r\n\r\nabc"
        )
    )
    assert data.startswith(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK")
    assert data.endswith(b"POST /e abc")


def test_a_handler_that_waits_keeps_its_context_across_the_wait() -> None:
    """The server runs a handler eagerly up to its first wait; the task that finishes it must
    run in the same context, or a ContextVar set before the wait cannot be reset after it."""
    data = run(exchange(b"GET /context HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"))
    assert data.startswith(b"HTTP/1.1 200 OK")
    assert data.endswith(b"inside")


def _payload(size: int) -> bytes:
    return bytes(range(251)) * (size // 251) + bytes(size % 251)


def _answers(data: bytes) -> list[bytes]:
    """The bodies of the 200 answers in ``data``, in order (each of them has a content-length)."""
    bodies = []
    while data:
        head, rest = data.split(b"\r\n\r\n", 1)
        assert head.startswith(b"HTTP/1.1 200 OK"), head
        length = int(head.split(b"content-length: ")[1].split(b"\r\n")[0])
        bodies.append(rest[:length])
        data = rest[length:]
    return bodies


def _post(url: bytes, body: bytes, extra: bytes = b"") -> bytes:
    return b"POST %s HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n%s\r\n%s" % (
        url,
        len(body),
        extra,
        body,
    )


CLOSE = b"GET /last HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"


def test_a_large_body_read_over_many_reads_arrives_whole_and_the_next_request_follows() -> None:
    body = _payload(BULK_MIN_BYTES * 3 + 17)  # read into its own buffer, past the parser
    data = run(exchange(_post(b"/big", body) + CLOSE, pieces=40))
    assert _answers(data) == [b"POST /big " + body, b"GET /last "]


def test_a_large_body_in_one_write_with_requests_around_it() -> None:
    body = _payload(BULK_MIN_BYTES + 1)
    request = _post(b"/a", b"hi") + _post(b"/big", body) + _post(b"/b", b"yo") + CLOSE
    data = run(exchange(request))
    assert _answers(data) == [b"POST /a hi", b"POST /big " + body, b"POST /b yo", b"GET /last "]


def test_a_large_body_queued_behind_a_waiting_handler() -> None:
    body = _payload(BULK_MIN_BYTES * 2)
    request = b"GET /context HTTP/1.1\r\nHost: x\r\n\r\n" + _post(b"/big", body) + CLOSE
    data = run(exchange(request, pieces=7))
    assert _answers(data) == [b"inside", b"POST /big " + body, b"GET /last "]


def test_a_large_body_with_expect_continue_and_connection_close() -> None:
    body = _payload(BULK_MIN_BYTES + 5)
    extra = b"Expect: 100-continue\r\nConnection: close\r\n"
    data = run(exchange(_post(b"/big", body, extra), pieces=3))
    assert data.startswith(b"HTTP/1.1 100 Continue\r\n\r\n")
    rest = data[len(b"HTTP/1.1 100 Continue\r\n\r\n") :]
    assert b"connection: close" in rest.split(b"\r\n\r\n", 1)[0]
    assert _answers(rest) == [b"POST /big " + body]


def test_a_large_body_over_the_limit_is_413_and_not_buffered() -> None:
    head = b"POST /big HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % (BULK_MIN_BYTES * 2)
    data = run(exchange(head + _payload(1000), max_request_size=BULK_MIN_BYTES))
    assert data.startswith(b"HTTP/1.1 413 Request Entity Too Large")


def test_only_a_large_declared_body_gets_its_own_buffer() -> None:
    big, small = _payload(BULK_MIN_BYTES), _payload(BULK_MIN_BYTES - 1)
    data = run(exchange(_post(b"/type", big) + _post(b"/type", small) + CLOSE, pieces=5))
    assert _answers(data) == [b"bytearray", b"bytes", b"GET /last "]


def test_answers_go_before_a_rejection_of_the_request_pipelined_behind_them() -> None:
    """Answers wait for the end of the loop's round of reads; a request rejected at once (here:
    too large, answered before its body is read) must not overtake the answers before it."""
    head = b"POST /big HTTP/1.1\r\nHost: x\r\nContent-Length: 5000\r\n\r\n"
    data = run(exchange(_post(b"/a", b"hi") + _post(b"/b", b"yo") + head, 100))
    first, second, rejected = data.split(b"HTTP/1.1 ")[1:]
    assert first.startswith(b"200 OK")
    assert first.endswith(b"POST /a hi")
    assert second.startswith(b"200 OK")
    assert second.endswith(b"POST /b yo")
    assert rejected.startswith(b"413 Request Entity Too Large")


def test_a_request_pipelined_behind_connection_close_gets_no_answer() -> None:
    data = run(exchange(CLOSE + _post(b"/a", b"hi")))
    assert _answers(data) == [b"GET /last "]


class RecordingTransport:
    def __init__(self) -> None:
        self.written: list[bytes] = []
        self.closed = False

    def writelines(self, parts: list[bytes]) -> None:
        self.written.append(b"".join(parts))

    def get_extra_info(self, name: str) -> None:
        return None

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        pass

    def close(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed


def test_answers_to_one_round_of_reads_leave_together_after_it() -> None:
    """Each connection's answers are written once the loop is done with the reads in hand, in
    one writelines per connection: not one by one while the next connections' requests are
    read (each write would wake the client on its own)."""

    async def scenario() -> tuple[list[list[bytes]], list[list[bytes]]]:
        server = HttpServer(EchoApp(), 1 << 20)
        transports = [RecordingTransport() for _ in range(3)]
        conns = [Connection(server) for _ in transports]
        for conn, transport in zip(conns, transports, strict=True):
            conn.connection_made(transport)
        for i, conn in enumerate(conns):
            conn.data_received(_post(b"/%d" % i, b"x") + _post(b"/%d" % i, b"y"))
        during = [list(t.written) for t in transports]
        await asyncio.sleep(0)
        return during, [t.written for t in transports]

    during, after = run(scenario())
    assert during == [[], [], []]
    assert [len(w) for w in after] == [1, 1, 1]
    for i, (written,) in enumerate(after):
        assert _answers(written) == [b"POST /%d x" % i, b"POST /%d y" % i]


class ClosingTransport(RecordingTransport):
    """A transport the client has left: closing, not yet reported lost."""

    def is_closing(self) -> bool:
        return True


class FailingTransport(RecordingTransport):
    def __init__(self) -> None:
        super().__init__()
        self.aborted = False

    def writelines(self, parts: list[bytes]) -> None:
        raise RuntimeError("the handle is closed")

    def abort(self) -> None:
        self.aborted = True


def test_a_connection_that_cannot_take_its_answers_does_not_keep_the_others_from_theirs() -> None:
    async def scenario() -> list[RecordingTransport]:
        server = HttpServer(EchoApp(), 1 << 20)
        transports = [RecordingTransport(), ClosingTransport(), FailingTransport()]
        transports.append(RecordingTransport())
        for i, transport in enumerate(transports):
            conn = Connection(server)
            conn.connection_made(transport)
            conn.data_received(_post(b"/%d" % i, b"x"))
        await asyncio.sleep(0)
        return transports

    ok, closing, failing, last = run(scenario())
    assert _answers(ok.written[0]) == [b"POST /0 x"]
    assert closing.written == []  # dropped, not written to a closing transport
    assert isinstance(failing, FailingTransport)
    assert failing.aborted
    assert _answers(last.written[0]) == [b"POST /3 x"]


def test_a_stream_pipelined_behind_connection_close_gets_no_answer() -> None:
    data = run(exchange(CLOSE + b"GET /stream HTTP/1.1\r\nHost: x\r\n\r\n"))
    assert _answers(data) == [b"GET /last "]


class FlowTransport(RecordingTransport):
    """Records the reads paused and resumed, and the half-close."""

    def __init__(self) -> None:
        super().__init__()
        self.reading = True
        self.eof = False

    def pause_reading(self) -> None:
        self.reading = False

    def resume_reading(self) -> None:
        self.reading = True

    def can_write_eof(self) -> bool:
        return True

    def write_eof(self) -> None:
        self.eof = True


def _connected(transport: RecordingTransport) -> Connection:
    conn = Connection(HttpServer(EchoApp(), 1 << 20))
    conn.connection_made(transport)
    return conn


def test_a_client_that_does_not_take_its_answers_is_not_read_until_it_does() -> None:
    async def scenario() -> list[bool]:
        transport = FlowTransport()
        conn = _connected(transport)
        seen = [transport.reading]
        conn.pause_writing()  # the transport's buffer passed its high-water mark
        seen.append(transport.reading)
        conn.resume_writing()
        seen.append(transport.reading)
        return seen

    assert run(scenario()) == [True, False, True]


def test_a_burst_of_pipelined_requests_is_written_before_the_round_ends() -> None:
    """Answers wait for the end of the round, but not past MAX_OUT_PARTS: a client pipelining
    without reading must meet the high-water mark while its requests are read."""

    async def scenario() -> tuple[int, int]:
        transport = RecordingTransport()
        conn = _connected(transport)
        conn.data_received(_post(b"/p", b"x") * (MAX_OUT_PARTS // 2 + 10))
        during = len(transport.written)
        await asyncio.sleep(0)
        return during, len(_answers(b"".join(transport.written)))

    during, answered = run(scenario())
    assert during >= 1
    assert answered == MAX_OUT_PARTS // 2 + 10


def test_the_sweep_answers_408_to_a_late_head_and_a_stalled_body() -> None:
    async def scenario(request: bytes) -> bytes:
        transport = FlowTransport()
        conn = _connected(transport)
        conn.data_received(request)
        conn.close_if_idle(0.0)  # not late yet
        assert transport.written == []
        conn.head_since -= 3600
        conn.last_active -= 3600
        conn.close_if_idle(0.0)
        await asyncio.sleep(0)
        assert transport.eof  # answered, then half-closed
        return b"".join(transport.written)

    late_head = run(scenario(b"GET /x HTTP/1.1\r\nHost: x\r\nX-Slow: "))
    assert late_head.startswith(b"HTTP/1.1 408 Request Timeout")
    assert b"--header-timeout" in late_head
    stalled = run(scenario(b"POST /x HTTP/1.1\r\nHost: x\r\nContent-Length: 9\r\n\r\nab"))
    assert stalled.startswith(b"HTTP/1.1 408 Request Timeout")
    assert b"--body-timeout" in stalled


class BodyRecorder:
    """Records the bodies it is given."""

    def __init__(self) -> None:
        self.bodies: list[bytes] = []

    async def respond(
        self, method: str, raw_url: bytes, headers: dict[str, str], body: bytes | bytearray
    ) -> HttpResponse:
        self.bodies.append(bytes(body))
        return HttpResponse(200, b"ok", "text/plain")


def _read_as_uvloop_does(conn: Connection, data: bytes) -> None:
    """``data`` through the connection's get_buffer and buffer_updated (asyncio's buffered
    protocol): a large body lands straight in its own buffer."""
    while data:
        into = conn.get_buffer(-1)
        n = min(len(into), len(data))
        into[:n] = data[:n]
        conn.buffer_updated(n)
        data = data[n:]


def test_a_large_body_cut_short_never_reaches_the_application() -> None:
    """A large body's buffer is not zeroed (transport/body_buffer.c, when built): it is handed
    on only once the whole body was written into it. A body one byte short -- the client left,
    or the body stalled (408) -- reaches no handler; a whole one arrives as it was sent."""
    body = _payload(BULK_MIN_BYTES * 2 + 7)
    request = _post(b"/big", body)

    async def scenario(ending: str) -> tuple[list[bytes], bytes]:
        app = BodyRecorder()
        transport = FlowTransport()
        conn = Connection(HttpServer(app, 1 << 20))
        conn.connection_made(transport)
        _read_as_uvloop_does(conn, request if ending == "whole" else request[:-1])
        if ending == "left":
            conn.connection_lost(None)
        elif ending == "late":
            conn.last_active -= 3600
            conn.close_if_idle(0.0)
        for _ in range(3):
            await asyncio.sleep(0)
        return app.bodies, b"".join(transport.written)

    assert run(scenario("whole"))[0] == [body]
    assert run(scenario("left")) == ([], b"")
    bodies, written = run(scenario("late"))
    assert bodies == []
    assert written.startswith(b"HTTP/1.1 408 Request Timeout")


def test_the_sweep_leaves_a_request_being_answered_alone() -> None:
    async def scenario() -> list[bytes]:
        transport = FlowTransport()
        conn = _connected(transport)
        conn.data_received(b"GET /context HTTP/1.1\r\nHost: x\r\n\r\n")  # waits: a task
        conn.last_active -= 3600
        conn.close_if_idle(0.0)
        await asyncio.sleep(0.05)
        return transport.written

    (written,) = run(scenario())
    assert _answers(written) == [b"inside"]


def test_empty_lines_instead_of_a_request_are_refused() -> None:
    async def scenario() -> bytes:
        transport = FlowTransport()
        conn = _connected(transport)
        for _ in range(MAX_BLANK_BYTES // 2 + 1):
            conn.data_received(b"\r\n")
        await asyncio.sleep(0)
        return b"".join(transport.written)

    assert run(scenario()).startswith(b"HTTP/1.1 400 Bad Request")


def test_a_refused_request_is_answered_after_the_one_still_computed() -> None:
    data = run(exchange(b"GET /context HTTP/1.1\r\nHost: x\r\n\r\nGET /" + b"a" * 20000))
    first, refused = data.split(b"HTTP/1.1 ")[1:]
    assert first.startswith(b"200 OK")
    assert first.endswith(b"inside")
    assert refused.startswith(b"414 ")


class WaitingApp:
    """A handler that waits on a future it was handed, and says when it was unwound."""

    def __init__(self) -> None:
        self.waiting: asyncio.Future[None] | None = None
        self.unwound = False

    async def respond(
        self, method: str, raw_url: bytes, headers: dict[str, str], body: bytes | bytearray
    ) -> HttpResponse:
        self.waiting = asyncio.get_running_loop().create_future()
        try:
            await self.waiting
            return HttpResponse(200, b"late", "text/plain")
        finally:
            self.unwound = True


def test_a_client_gone_in_the_round_of_its_request_unwinds_the_handler_that_waits() -> None:
    """The task that was to resume the handler is cancelled before its first step: the handler
    is unwound all the same (its ``finally`` runs, what it waits for is cancelled), not left
    suspended until a collection, which a compiled coroutine never unwinds."""

    async def scenario() -> WaitingApp:
        app = WaitingApp()
        conn = Connection(HttpServer(app, 1 << 20))
        conn.connection_made(RecordingTransport())
        conn.data_received(_post(b"/wait", b"x"))
        conn.connection_lost(None)
        await asyncio.sleep(0)
        return app

    app = run(scenario())
    assert app.unwound
    assert app.waiting is not None
    assert app.waiting.cancelled()
