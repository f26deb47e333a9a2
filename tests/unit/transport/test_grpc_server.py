"""The gRPC server in-process: frames from python-hyper's h2 client fed to one connection, what
it writes read back by the same client. Behaviour that the socket-level tests cannot pin down:
when answers are written, what a deadline or a reset does to the work, flow control's order."""

from __future__ import annotations

import asyncio
import gzip
import threading
from collections.abc import AsyncIterator
from typing import Any

import h2.config
import h2.connection
import h2.events
import h2.settings
import pytest

from rosettaserve.core.errors import Overloaded
from rosettaserve.transport import grpc_call
from rosettaserve.transport import h2 as server_h2
from rosettaserve.transport.grpc import GrpcServer
from rosettaserve.transport.h2_stalls import close_stalled
from rosettaserve.web.content_coding import INLINE_INFLATED
from rosettaserve.web.grpc_services import CallTracker

SERVICE = "test.Echo"


class Echo:
    def __init__(self) -> None:
        self.cancelled = 0
        self.release = asyncio.Event()
        self.tick = asyncio.Event()
        self.left = 0

    async def Now(self, request: bytes, context: Any) -> bytes:
        return b"now:" + request

    async def Later(self, request: bytes, context: Any) -> bytes:
        try:
            await self.release.wait()
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        return b"later:" + request

    async def Broken(self, request: bytes, context: Any) -> Any:
        return None  # not bytes: the reply cannot be written

    async def Crash(self, request: bytes, context: Any) -> bytes:
        raise RuntimeError("x" * 5_000_000)  # not a ServingError: an unexpected failure

    async def Busy(self, request: bytes, context: Any) -> bytes:
        raise Overloaded("the queue is full", headers={"retry-after": "1"})

    async def Length(self, request: bytes, context: Any) -> bytes:
        return b"%d" % len(request)

    async def Lengths(self, requests: AsyncIterator[bytes], context: Any) -> AsyncIterator[bytes]:
        async for request in requests:
            yield b"%d" % len(request)

    async def Chat(self, requests: AsyncIterator[bytes], context: Any) -> AsyncIterator[bytes]:
        async for request in requests:
            yield b"re:" + request

    async def Tick(self, request: bytes, context: Any) -> AsyncIterator[bytes]:
        """A subscription: one reply now and one each time ``tick`` is set; ``left`` counts
        the subscriptions that ended, however they ended."""
        try:
            while True:
                yield b"tick:" + request
                await self.tick.wait()
                self.tick.clear()
        finally:
            self.left += 1

    async def Hoard(self, requests: AsyncIterator[bytes], context: Any) -> AsyncIterator[bytes]:
        """Reads nothing until released, then answers each request with its size."""
        await self.release.wait()
        async for request in requests:
            yield str(len(request)).encode()


RPCS = {
    "Now": (bytes, bytes, False),
    "Later": (bytes, bytes, False),
    "Busy": (bytes, bytes, False),
    "Broken": (bytes, bytes, False),
    "Crash": (bytes, bytes, False),
    "Chat": (bytes, bytes, True),
    "Length": (bytes, bytes, False),
    "Lengths": (bytes, bytes, True),
    "Hoard": (bytes, bytes, True),
    "Tick": (bytes, bytes, "subscription"),
}


class Transport:
    """Records each write (one ``writelines`` is one entry)."""

    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.closed = False
        self.reading = True

    def get_extra_info(self, name: str) -> None:
        return None

    def set_write_buffer_limits(self, high: int) -> None:
        pass

    def pause_reading(self) -> None:
        self.reading = False

    def resume_reading(self) -> None:
        self.reading = True

    def writelines(self, parts: list[bytes]) -> None:
        self.writes.append(b"".join(bytes(p) for p in parts))

    def write(self, data: bytes) -> None:
        self.writes.append(bytes(data))

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True

    def abort(self) -> None:
        self.closed = True


class Peer:
    """A client connection wired to one server connection, no socket between."""

    def __init__(self, servicer: Echo, window: int = 1 << 20, max_message: int = 1 << 20) -> None:
        self.server = GrpcServer([(SERVICE, servicer, RPCS)], max_message, CallTracker())
        self.conn = server_h2.Connection(self.server.h2)
        self.transport = Transport()
        self.conn.connection_made(self.transport)
        config = h2.config.H2Configuration(client_side=True, header_encoding=None)
        self.client = h2.connection.H2Connection(config)
        self.client.initiate_connection()
        self.client.update_settings({h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: window})
        self.events: list[h2.events.Event] = []
        self.push()
        self.pull()

    def push(self) -> None:
        """What the client has to send, to the server in one read."""
        data = self.client.data_to_send()
        if data:
            self.conn.data_received(data)

    def pull(self) -> None:
        """What the server wrote, to the client."""
        writes, self.transport.writes = self.transport.writes, []
        for data in writes:
            self.events += self.client.receive_data(data)

    def start(self, rpc: str, *, timeout: str = "", encoding: str = "") -> int:
        stream_id: int = self.client.get_next_available_stream_id()
        headers = [
            (":method", "POST"),
            (":scheme", "http"),
            (":path", f"/{SERVICE}/{rpc}"),
            (":authority", "test"),
            ("content-type", "application/grpc"),
            ("te", "trailers"),
        ]
        if timeout:
            headers.append(("grpc-timeout", timeout))
        if encoding:
            headers.append(("grpc-encoding", encoding))
        self.client.send_headers(stream_id, headers)
        return stream_id

    def message(
        self, stream_id: int, payload: bytes, end: bool = True, compressed: bool = False
    ) -> None:
        if compressed:
            payload = gzip.compress(payload)
        framed = bytes((compressed,)) + len(payload).to_bytes(4, "big") + payload
        self.client.send_data(stream_id, framed, end_stream=end)

    def replies(self, stream_id: int) -> bytes:
        return b"".join(
            e.data
            for e in self.events
            if isinstance(e, h2.events.DataReceived) and e.stream_id == stream_id
        )

    def status(self, stream_id: int) -> dict[bytes, bytes] | None:
        """The trailers (or the trailers-only headers) of the stream, once it ended."""
        for event in self.events:
            if isinstance(event, h2.events.TrailersReceived) and event.stream_id == stream_id:
                return dict(event.headers)
            if (
                isinstance(event, h2.events.ResponseReceived)
                and event.stream_id == stream_id
                and b"grpc-status" in dict(event.headers)
            ):
                return dict(event.headers)
        return None


def framed(payload: bytes) -> bytes:
    return b"\x00" + len(payload).to_bytes(4, "big") + payload


async def call(peer: Peer, rpc: str, payload: bytes) -> int:
    """A unary call sent in one read; the loop runs, and what the server wrote is read back."""
    stream_id = peer.start(rpc)
    peer.message(stream_id, payload)
    peer.push()
    await settle()
    peer.pull()
    return stream_id


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


def test_answers_of_one_read_leave_together_after_the_read() -> None:
    async def main() -> None:
        peer = Peer(Echo())
        await settle()
        peer.pull()  # the server's SETTINGS ACK
        third = peer.start("Now")
        peer.message(third, b"c")
        fourth = peer.start("Now")
        peer.message(fourth, b"d")
        peer.push()  # both calls in one read
        assert peer.transport.writes == []  # answered, not yet written
        await settle()
        assert len(peer.transport.writes) == 1  # both answers in one write
        peer.pull()
        assert peer.replies(third) == framed(b"now:c")
        assert peer.replies(fourth) == framed(b"now:d")
        assert peer.status(third) == {b"grpc-status": b"0"}

    asyncio.run(main())


def test_a_deadline_ends_the_call_and_cancels_its_work() -> None:
    async def main() -> None:
        servicer = Echo()
        peer = Peer(servicer)
        stream_id = peer.start("Later", timeout="20m")
        peer.message(stream_id, b"x")
        peer.push()
        await settle()
        assert peer.status(stream_id) is None  # still at work
        for _ in range(200):
            await asyncio.sleep(0.01)
            peer.pull()
            if peer.status(stream_id) is not None:
                break
        status = peer.status(stream_id)
        assert status is not None
        assert status[b"grpc-status"] == b"4"  # DEADLINE_EXCEEDED
        await settle()
        assert servicer.cancelled == 1
        assert peer.server.tracker.active == 0

    asyncio.run(main())


def test_a_reset_from_the_client_cancels_the_work() -> None:
    async def main() -> None:
        servicer = Echo()
        peer = Peer(servicer)
        stream_id = peer.start("Later")
        peer.message(stream_id, b"x")
        peer.push()
        await settle()
        peer.client.reset_stream(stream_id)
        peer.push()
        await settle()
        assert servicer.cancelled == 1
        assert not peer.conn.streams
        other = peer.start("Now")  # the connection goes on
        peer.message(other, b"y")
        peer.push()
        await settle()
        peer.pull()
        assert peer.replies(other) == framed(b"now:y")

    asyncio.run(main())


def test_a_reset_in_the_same_read_as_the_request_cancels_the_work() -> None:
    """The call's task is cancelled before its first step: the servicer still sees the
    cancellation (not a silent drop), and the call no longer counts as busy (#24 item 6)."""

    async def main() -> None:
        servicer = Echo()
        peer = Peer(servicer)
        stream_id = peer.start("Later")
        peer.message(stream_id, b"x")
        peer.client.reset_stream(stream_id)
        peer.push()  # the request and its reset in one read
        await settle()
        assert servicer.cancelled == 1
        assert peer.server.tracker.active == 0
        assert not peer.conn.streams

    asyncio.run(main())


def test_nothing_is_written_before_the_clients_preface() -> None:
    """RFC 9113 3.4: the server's SETTINGS answer the client's preface (#24 item 12)."""

    async def main() -> None:
        server = GrpcServer([(SERVICE, Echo(), RPCS)], 1 << 20, CallTracker())
        conn = server_h2.Connection(server.h2)
        transport = Transport()
        conn.connection_made(transport)
        await settle()
        assert transport.writes == []
        conn.data_received(b"PRI * HTTP/2.0\r\n")  # half of it
        await settle()
        assert transport.writes == []
        conn.data_received(b"\r\nSM\r\n\r\n")
        await settle()
        assert transport.writes[0][3] == server_h2.SETTINGS

    asyncio.run(main())


def test_replies_wait_for_the_window_and_trailers_come_last() -> None:
    async def main() -> None:
        peer = Peer(Echo(), window=10)
        stream_id = peer.start("Now")
        payload = bytes(range(100))
        peer.message(stream_id, payload)
        peer.push()
        await settle()
        peer.pull()
        assert len(peer.replies(stream_id)) == 10  # the client's window
        assert peer.status(stream_id) is None
        expected = framed(b"now:" + payload)
        for _ in range(20):  # 10 more bytes each time the client opens its window
            if peer.status(stream_id) is not None:
                break
            got = len(peer.replies(stream_id))
            peer.client.increment_flow_control_window(10, stream_id)
            peer.push()
            await settle()
            peer.pull()
            assert len(peer.replies(stream_id)) - got <= 10
        assert peer.replies(stream_id) == expected
        assert peer.status(stream_id) == {b"grpc-status": b"0"}

    asyncio.run(main())


def test_a_serving_error_is_its_status_with_its_headers_as_trailers() -> None:
    async def main() -> None:
        peer = Peer(Echo())
        stream_id = await call(peer, "Busy", b"x")
        status = peer.status(stream_id)
        assert status is not None
        assert status[b"grpc-status"] == b"8"  # RESOURCE_EXHAUSTED, from core's table
        assert status[b"grpc-message"] == b"the queue is full"
        assert status[b"retry-after"] == b"1"

    asyncio.run(main())


def test_a_stream_each_way_answers_each_request_as_it_comes() -> None:
    async def main() -> None:
        peer = Peer(Echo())
        stream_id = peer.start("Chat")
        peer.message(stream_id, b"one", end=False)
        peer.push()
        await settle()
        peer.pull()
        assert peer.replies(stream_id) == framed(b"re:one")
        peer.message(stream_id, b"two", end=True)
        peer.push()
        await settle()
        peer.pull()
        assert peer.replies(stream_id) == framed(b"re:one") + framed(b"re:two")
        assert peer.status(stream_id) == {b"grpc-status": b"0"}

    asyncio.run(main())


def test_unread_streamed_requests_shut_the_window_until_the_servicer_reads() -> None:
    async def main() -> None:
        servicer = Echo()
        peer = Peer(servicer)
        stream_id = peer.start("Hoard")
        piece = bytes(256 * 1024)
        total, sent = 100, 0  # 25 MiB: more than the stream's 16 MiB window
        for _ in range(total):
            if peer.client.local_flow_control_window(stream_id) < len(piece) + 5:
                await settle()
                peer.push()
                peer.pull()  # any window update the server sent
                if peer.client.local_flow_control_window(stream_id) < len(piece) + 5:
                    break
            peer.message(stream_id, piece, end=False)
            sent += 1
            peer.push()
        assert sent < total  # the server stopped reopening the window
        queued = peer.conn.streams[stream_id].receiver.requests.items  # type: ignore[union-attr]
        assert len(queued) == sent  # everything sent is held, nothing more can come
        servicer.release.set()
        await settle()
        peer.pull()
        assert peer.client.local_flow_control_window(stream_id) > len(piece)  # reopened
        while sent < total:
            if peer.client.local_flow_control_window(stream_id) < len(piece) + 5:
                await settle()
                peer.pull()
                continue
            peer.message(stream_id, piece, end=sent == total - 1)
            sent += 1
            peer.push()
        for _ in range(50):
            await settle()
            peer.pull()
            if peer.status(stream_id) is not None:
                break
        assert peer.status(stream_id) == {b"grpc-status": b"0"}
        assert peer.replies(stream_id) == framed(str(len(piece)).encode()) * total

    asyncio.run(main())


def test_an_idle_connection_is_told_goodbye_and_closed_but_not_one_at_work() -> None:
    async def main() -> None:
        peer = Peer(Echo())
        stream_id = peer.start("Later")
        peer.message(stream_id, b"x")
        peer.push()
        await settle()
        quiet = peer.conn.server.idle_timeout + 1  # the sweep's measure is the server's own
        peer.conn.last_active -= quiet
        peer.conn.close_if_idle(0.0)  # a call at work: left alone
        assert not peer.transport.closed
        peer.client.reset_stream(stream_id)
        peer.push()
        await settle()
        peer.conn.close_if_idle(0.0)  # active lately: left alone
        assert not peer.transport.closed
        peer.conn.last_active -= quiet
        peer.conn.close_if_idle(0.0)
        assert peer.transport.closed
        peer.pull()
        goaway = [e for e in peer.events if isinstance(e, h2.events.ConnectionTerminated)]
        assert len(goaway) == 1
        assert goaway[0].error_code == 0  # NO_ERROR: the client reconnects for its next call

    asyncio.run(main())


def test_a_client_that_takes_nothing_for_the_send_timeout_is_aborted() -> None:
    """The socket full (the client reads nothing): the sweep stamps it, and aborts the
    connection once the send timeout passed without the client taking anything; a resume in
    between (it read) starts the count again."""

    async def main() -> None:
        peer = Peer(Echo())
        conn = peer.conn
        conn.pause_writing()
        close_stalled(conn, 100.0, 1.0)
        close_stalled(conn, 100.9, 1.0)
        assert not peer.transport.closed
        conn.resume_writing()
        conn.pause_writing()
        close_stalled(conn, 101.5, 1.0)  # stamped again: read from 101.5 on
        close_stalled(conn, 102.4, 1.0)
        assert not peer.transport.closed
        close_stalled(conn, 102.6, 1.0)
        assert peer.transport.closed

    asyncio.run(main())


def test_a_client_that_does_not_read_is_not_read_either() -> None:
    async def main() -> None:
        peer = Peer(Echo())
        peer.conn.pause_writing()  # the transport's buffer passed its high-water mark
        assert not peer.transport.reading
        peer.conn.resume_writing()
        assert peer.transport.reading

    asyncio.run(main())


def test_a_reply_that_cannot_be_written_is_internal_and_the_connection_goes_on() -> None:
    async def main() -> None:
        peer = Peer(Echo())
        stream_id = await call(peer, "Broken", b"x")
        status = peer.status(stream_id)
        assert status is not None
        assert status[b"grpc-status"] == b"13"  # INTERNAL
        assert b"TypeError" in status[b"grpc-message"]
        other = await call(peer, "Now", b"y")
        assert peer.replies(other) == framed(b"now:y")

    asyncio.run(main())


def test_an_unexpected_failure_s_message_is_bounded() -> None:
    """A 5 MB exception message reaches the client as at most 2 KiB (its trailer would pass
    grpcio's metadata limit and fail the call with RESOURCE_EXHAUSTED)."""

    async def main() -> None:
        peer = Peer(Echo())
        status = peer.status(await call(peer, "Crash", b"x"))
        assert status is not None
        assert status[b"grpc-status"] == b"13"  # INTERNAL
        message = status[b"grpc-message"]
        assert message.startswith(b"RuntimeError: xxx")
        assert message.endswith(b"more characters)")
        assert len(message) < 3 * 1024

    asyncio.run(main())


def test_a_client_resetting_most_of_its_streams_is_told_to_go_away() -> None:
    async def main() -> None:
        servicer = Echo()
        peer = Peer(servicer)
        for _ in range(server_h2.RESET_LIMIT):  # at the limit: still served
            stream_id = peer.start("Later")
            peer.client.reset_stream(stream_id)
            peer.push()
        await settle()
        assert not peer.transport.closed
        stream_id = peer.start("Later")
        peer.client.reset_stream(stream_id)
        peer.push()
        peer.pull()
        goaway = [e for e in peer.events if isinstance(e, h2.events.ConnectionTerminated)]
        assert len(goaway) == 1
        assert goaway[0].error_code == server_h2.ENHANCE_YOUR_CALM
        assert peer.transport.closed

    asyncio.run(main())


def test_a_subscription_is_not_busy_and_ends_when_its_client_leaves() -> None:
    """A server stream waiting for events (grpc.health.v1's Watch): its replies come as the
    events do, it is not work a shutdown waits for, a unary call beside it is answered as
    alone, and a client's reset ends it (its servicer's ``finally`` runs)."""

    async def main() -> None:
        servicer = Echo()
        peer = Peer(servicer)
        watching = await call(peer, "Tick", b"w")
        assert peer.replies(watching) == framed(b"tick:w")
        assert peer.status(watching) is None  # open
        assert peer.server.tracker.active == 0  # not counted as work
        beside = await call(peer, "Now", b"n")
        assert (peer.replies(beside), peer.status(beside)) == (
            framed(b"now:n"),
            {b"grpc-status": b"0"},
        )
        servicer.tick.set()
        await settle()
        peer.pull()
        assert peer.replies(watching) == framed(b"tick:w") * 2
        peer.client.reset_stream(watching)
        peer.push()
        await settle()
        assert servicer.left == 1
        assert not peer.conn.streams

    asyncio.run(main())


async def ended(peer: Peer, *stream_ids: int) -> list[int]:
    """Run the loop until every stream ended; the order in which they did."""
    order: list[int] = []
    for _ in range(2000):
        await asyncio.sleep(0.005)
        peer.pull()
        order += [s for s in stream_ids if s not in order and peer.status(s) is not None]
        if len(order) == len(stream_ids):
            return order
    raise AssertionError(f"streams still open: {set(stream_ids) - set(order)}")


LARGE = b"\0" * (INLINE_INFLATED * 2)  # inflates past what is inflated on the event loop


def test_a_large_compressed_message_is_inflated_off_the_loop_and_others_go_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The large message's inflating is held until the small call has ended: on the threads it
    waits for the loop to answer the small one; on the loop (the fault) it would hold the loop,
    time out, and the large call would end first."""
    small_ended = threading.Event()
    decoded = grpc_call.Call.decoded

    def held(call: grpc_call.Call, message: bytes, budget: int | None) -> Any:
        if budget is None:  # the inflating of a large message
            small_ended.wait(5)
        return decoded(call, message, budget)

    monkeypatch.setattr(grpc_call.Call, "decoded", held)

    async def main() -> None:
        peer = Peer(Echo(), window=1 << 24, max_message=1 << 23)
        large = peer.start("Length", encoding="gzip")
        peer.message(large, LARGE, compressed=True)
        small = peer.start("Now")
        peer.message(small, b"s")
        peer.push()  # both in one read: the large one first
        await ended(peer, small)
        assert peer.status(large) is None  # still inflating
        small_ended.set()
        await ended(peer, large)
        assert peer.replies(small) == framed(b"now:s")
        assert peer.replies(large) == framed(b"%d" % len(LARGE))

    asyncio.run(main())


def test_a_large_compressed_message_keeps_its_place_in_a_stream() -> None:
    async def main() -> None:
        peer = Peer(Echo(), window=1 << 24, max_message=1 << 23)
        chat = peer.start("Lengths", encoding="gzip")
        peer.message(chat, b"one", end=False)
        peer.message(chat, LARGE, end=False, compressed=True)
        peer.message(chat, b"three", end=True, compressed=True)
        peer.push()
        await ended(peer, chat)
        replies = framed(b"3") + framed(b"%d" % len(LARGE)) + framed(b"5")
        assert peer.replies(chat) == replies
        assert peer.status(chat) == {b"grpc-status": b"0"}

    asyncio.run(main())


def test_a_compressed_message_past_the_limit_is_refused_after_inflating_off_the_loop() -> None:
    async def main() -> None:
        peer = Peer(Echo(), window=1 << 24, max_message=len(LARGE) - 1)
        large = peer.start("Length", encoding="gzip")
        peer.message(large, LARGE, compressed=True)
        peer.push()
        await ended(peer, large)
        status = peer.status(large)
        assert status is not None
        assert status[b"grpc-status"] == b"8"  # RESOURCE_EXHAUSTED
        assert b"decompressed message larger than max" in status[b"grpc-message"]

    asyncio.run(main())
