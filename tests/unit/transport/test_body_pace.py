"""A request body is held to a pace (``body_pace``): no stall longer than the body timeout, and
past it at least the minimum rate on average, on HTTP/1.1 (the sweep's 408) and on HTTP/2 (the
stream answered and reset, the connection's other streams untouched). The clocks are moved by
hand: the sweeps are called with the time they would see."""

from __future__ import annotations

import asyncio

import h2.events

from rosettaserve.transport.body_pace import BodyPace
from rosettaserve.transport.h1 import Connection, HttpServer
from rosettaserve.transport.h1_head import H1Limits
from rosettaserve.transport.h2_stalls import late_requests
from tests.unit.transport.test_grpc_server import Echo, Peer, call, framed, settle
from tests.unit.transport.test_h1 import EchoApp, FlowTransport

PACE = BodyPace(timeout=1.0, min_rate=10)
DEADLINE_EXCEEDED = b"4"


def test_a_body_has_its_timeout_and_a_second_more_for_each_min_rate_bytes() -> None:
    due = PACE.due(100.0, 0)
    assert not PACE.overdue(due, 0, 101.0)
    assert PACE.overdue(due, 0, 101.01)
    assert not PACE.overdue(due, 50, 106.0)  # 50 bytes at 10 a second: 5 s more
    assert PACE.overdue(due, 50, 106.01)
    # bytes counted before the clock started buy nothing
    assert PACE.overdue(PACE.due(100.0, 1000), 1000, 101.01)


# -- HTTP/1.1 --------------------------------------------------------------------------------


def _reading(body_sent: bytes, declared: int = 1000) -> tuple[Connection, FlowTransport]:
    limits = H1Limits(body_timeout=PACE.timeout, body_min_rate=PACE.min_rate)
    conn = Connection(HttpServer(EchoApp(), 1 << 20, limits=limits))
    transport = FlowTransport()
    conn.connection_made(transport)
    head = b"POST /x HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % declared
    conn.data_received(head + body_sent)
    return conn, transport


async def _sweep(conn: Connection, transport: FlowTransport) -> bytes:
    """What the sweep has the connection write (at the end of the loop's round)."""
    conn.close_if_idle(0.0)
    await asyncio.sleep(0)
    return b"".join(transport.written)


def test_h1_a_body_still_arriving_but_behind_its_pace_is_408() -> None:
    async def scenario() -> tuple[bytes, bytes]:
        conn, transport = _reading(b"12345")
        before = await _sweep(conn, transport)
        conn.body_due -= 3600  # begun an hour ago; its last byte just now (not a stall)
        return before, await _sweep(conn, transport)

    before, after = asyncio.run(scenario())
    assert before == b""
    assert after.startswith(b"HTTP/1.1 408 Request Timeout")
    assert b"--body-min-rate" in after
    assert b"connection: close" in after


def test_h1_the_bytes_received_buy_the_body_time() -> None:
    """500 bytes at 10 a second: 50 s past the timeout's 1 s."""

    async def scenario() -> tuple[bytes, bytes]:
        conn, transport = _reading(b"a" * 500)
        conn.body_due -= 45
        within = await _sweep(conn, transport)
        conn.body_due -= 10
        return within, await _sweep(conn, transport)

    within, past = asyncio.run(scenario())
    assert within == b""
    assert past.startswith(b"HTTP/1.1 408")


def test_h1_a_body_is_not_late_while_the_server_does_not_read_it() -> None:
    """Reading paused (the client takes no answers): the body's clock starts again."""

    async def scenario() -> bytes:
        conn, transport = _reading(b"12345")
        conn.pause_writing()
        conn.body_due -= 3600
        conn.close_if_idle(0.0)  # held: the clock restarts from now
        conn.resume_writing()
        return await _sweep(conn, transport)

    assert asyncio.run(scenario()) == b""


def test_h1_a_stalled_body_is_still_408_for_the_body_timeout() -> None:
    async def scenario() -> bytes:
        conn, transport = _reading(b"a" * 500)  # far ahead of its pace
        conn.last_active -= 2  # and nothing for 2 s
        return await _sweep(conn, transport)

    answer = asyncio.run(scenario())
    assert answer.startswith(b"HTTP/1.1 408")
    assert b"stalled" in answer
    assert b"--body-timeout" in answer


# -- HTTP/2 ----------------------------------------------------------------------------------

PREFIX_OF_100 = b"\x00" + (100).to_bytes(4, "big")  # a message of 100 bytes begins


def _resets(peer: Peer, stream_id: int) -> list[int]:
    return [
        e.error_code
        for e in peer.events
        if isinstance(e, h2.events.StreamReset) and e.stream_id == stream_id
    ]


async def _swept(peer: Peer, now: float) -> None:
    late_requests(peer.conn, now, PACE)
    await settle()
    peer.pull()


def test_h2_a_dripping_request_is_answered_and_reset_while_its_neighbour_is_served() -> None:
    async def main() -> None:
        peer = Peer(Echo())
        drip = peer.start("Now")
        peer.client.send_data(drip, PREFIX_OF_100)
        peer.push()
        await _swept(peer, 100.0)  # the first look: its clock starts
        for second in range(1, 4):  # a byte a second: never a stall, far below 10 a second
            peer.client.send_data(drip, b"a")
            peer.push()
            neighbour = await call(peer, "Now", b"%d" % second)  # same connection
            assert peer.replies(neighbour) == framed(b"now:%d" % second)
            assert peer.status(neighbour) == {b"grpc-status": b"0"}
            await _swept(peer, 100.0 + second * 0.6)
            if peer.status(drip) is not None:
                break
        status = peer.status(drip)
        assert status is not None, "the dripping request was not cut"
        assert status[b"grpc-status"] == DEADLINE_EXCEEDED
        assert b"--body-min-rate" in status[b"grpc-message"]
        assert _resets(peer, drip) == [0]  # NO_ERROR: its answer was whole (RFC 9113 8.1)
        assert drip not in peer.conn.streams
        after = await call(peer, "Now", b"z")
        assert peer.replies(after) == framed(b"now:z")

    asyncio.run(main())


def test_h2_a_request_that_stalls_is_answered_and_reset() -> None:
    async def main() -> None:
        peer = Peer(Echo())
        stalled = peer.start("Now")  # headers, and nothing more
        peer.push()
        await _swept(peer, 100.0)
        await _swept(peer, 100.9)
        assert peer.status(stalled) is None
        await _swept(peer, 101.1)
        status = peer.status(stalled)
        assert status is not None
        assert status[b"grpc-status"] == DEADLINE_EXCEEDED
        assert b"--body-timeout" in status[b"grpc-message"]
        assert _resets(peer, stalled) == [0]

    asyncio.run(main())


def test_h2_a_request_that_came_whole_is_never_timed() -> None:
    async def main() -> None:
        servicer = Echo()
        peer = Peer(servicer)
        working = await call(peer, "Later", b"x")  # at work for as long as it takes
        for now in (100.0, 200.0, 300.0):
            await _swept(peer, now)
        assert peer.status(working) is None
        servicer.release.set()
        await settle()
        peer.pull()
        assert peer.replies(working) == framed(b"later:x")

    asyncio.run(main())


def test_h2_a_streaming_call_is_timed_per_message_not_between_messages() -> None:
    async def main() -> None:
        peer = Peer(Echo())
        chat = peer.start("Chat")
        peer.message(chat, b"hi", end=False)
        peer.push()
        for now in (100.0, 200.0, 300.0):  # between messages: the client sends when it likes
            await _swept(peer, now)
        assert peer.replies(chat) == framed(b"re:hi")
        assert not _resets(peer, chat)
        peer.client.send_data(chat, framed(b"again") + PREFIX_OF_100)  # one whole, one begun
        peer.push()
        await _swept(peer, 400.0)
        await _swept(peer, 400.9)
        assert not _resets(peer, chat)
        await _swept(peer, 401.1)  # the message begun stalled
        assert peer.replies(chat) == framed(b"re:hi") + framed(b"re:again")
        status = peer.status(chat)
        assert status is not None
        assert status[b"grpc-status"] == DEADLINE_EXCEEDED
        assert _resets(peer, chat)

    asyncio.run(main())


def test_h2_a_request_is_not_late_while_the_server_reads_none_of_it() -> None:
    """Its window held shut by the application, or the connection not read (the client takes
    no answers): the clock is held back, and runs again after."""

    async def main() -> None:
        peer = Peer(Echo())
        first, second = peer.start("Now"), peer.start("Now")
        peer.push()
        await _swept(peer, 100.0)
        stream = peer.conn.streams[first]
        peer.conn.hold(stream, True)
        peer.conn.pause_writing()
        await _swept(peer, 200.0)
        peer.conn.resume_writing()
        await _swept(peer, 300.0)  # the first still held; the second late now
        assert peer.status(first) is None
        assert peer.status(second) is not None
        peer.conn.hold(stream, False)
        await _swept(peer, 300.9)
        assert peer.status(first) is None
        await _swept(peer, 301.1)
        assert peer.status(first) is not None

    asyncio.run(main())
