"""What an HTTP/2 client is slow at: taking its answers (the send timeout: answers a client
takes none of are dropped), and sending its requests (a request that stalls or drips is reset).

RFC 9113 6.9 lets a client keep a flow-control window shut as long as it likes, and a sender
waits. A server cannot wait forever: each stream held so keeps its call's answer in memory, and
up to SETTINGS_MAX_CONCURRENT_STREAMS of them a connection. So, as nginx's ``send_timeout`` and
Go's ``http2.Server`` write timeout do, an answer that makes no progress for the send timeout
(``--send-timeout``) is given up:

- a stream whose queued DATA waits on its own window: RST_STREAM(CANCEL) ("the stream is no
  longer needed", RFC 9113 7; Go sends INTERNAL_ERROR, nginx PROTOCOL_ERROR), its queue freed
  and its call cancelled; the connection goes on;
- streams waiting on the connection's window (the client takes nothing on any stream): GOAWAY
  (NO_ERROR, "send timeout") and the close;
- a client that does not read the socket at all (the write buffer stays above its high-water
  mark, so the connection is no longer read): the connection is aborted, as a close would wait
  for the buffer to drain.

There is no timer per stream: the server's idle sweep (``idle.sweep``) calls ``close_stalled``
every quarter of the timeout. A stream with queued data seen by the sweep is stamped; a DATA
frame sent clears the stamp (``Sender.pump``), so only an answer that moved no byte for the
whole timeout is dropped, and one the client reads slowly but steadily is not.

A request is held to the pace of ``body_pace`` (``--body-timeout``, ``--body-min-rate``), as an
HTTP/1.1 body is, by the same sweep (``late_requests``): timed from its first look at a stream
whose request is not whole, or, on a call that streams its requests, at a message begun
(``grpc_call`` stops the clock between messages: the client sends the next when it likes); a
stall is a count of DATA bytes unchanged since a look the timeout ago. A request that stalls or
drips is answered by its receiver (a gRPC call: DEADLINE_EXCEEDED, saying which flag) and its
stream reset (NO_ERROR after a whole answer, RFC 9113 8.1; else CANCEL); the connection and its
other streams go on. The clock is held back while the client cannot send: the stream's window
held shut by the application, or the connection not read (its client takes no answers).
"""

from __future__ import annotations

import logging
from typing import Protocol

from rosettaserve.transport.body_pace import BodyPace
from rosettaserve.transport.h2_stream import CLOCK_STOPPED, CLOCK_TO_START, Stream
from rosettaserve.transport.h2_wire import CANCEL, NO_ERROR

log = logging.getLogger("rosettaserve.grpc")


class Swept(Protocol):
    """What the sweep sees of a connection (``h2.Connection``) and does to it."""

    writable: bool
    unwritable_since: float

    @property
    def streams(self) -> dict[int, Stream]: ...

    @property
    def send_window(self) -> int: ...

    def reset(self, stream_id: int, code: int) -> None: ...

    def goaway(self, code: int, message: str = "") -> None: ...

    def close(self) -> None: ...

    def abort(self) -> None: ...


def close_stalled(conn: Swept, now: float, timeout: float) -> None:
    """Drop what of ``conn`` has waited on its client longer than ``timeout`` seconds."""
    if not conn.writable:
        if not conn.unwritable_since:
            conn.unwritable_since = now
        elif now - conn.unwritable_since > timeout:
            log.info("aborting an HTTP/2 connection: the client read nothing for %gs", timeout)
            conn.abort()
            return
    stalled = []
    for stream in conn.streams.values():
        if not stream.pending:
            stream.stalled_since = 0.0
        elif not stream.stalled_since:
            stream.stalled_since = now
        elif now - stream.stalled_since > timeout:
            stalled.append(stream.id)
    if not stalled:
        return
    if conn.send_window <= 0:
        message = f"send timeout: the connection's window stayed shut for {timeout:g}s"
        log.info("closing an HTTP/2 connection: %s", message)
        conn.goaway(NO_ERROR, message)
        conn.close()
        return
    for stream_id in stalled:
        conn.reset(stream_id, CANCEL)


def late_requests(conn: Swept, now: float, pace: BodyPace) -> None:
    """Answer and reset the streams whose request comes too slowly."""
    late = []
    for stream in conn.streams.values():
        reason = _pace(stream, now, pace, not conn.writable)
        if reason:
            late.append((stream, reason))
    for stream, reason in late:
        log.info("resetting HTTP/2 stream %d: %s", stream.id, reason)
        if stream.receiver is not None:
            stream.receiver.late(reason)
        conn.reset(stream.id, NO_ERROR if stream.local_closed else CANCEL)


def _pace(stream: Stream, now: float, pace: BodyPace, paused: bool) -> str:
    """Why the stream's request is late ("": it is not), its clock started or held back."""
    due = stream.body_due
    if stream.remote_closed or due == CLOCK_STOPPED:
        return ""
    received = stream.received
    if due == CLOCK_TO_START or stream.held or paused:
        stream.body_due = max(due, pace.due(now, received))
        stream.body_seen, stream.body_quiet_since = received, now
        return ""
    if received != stream.body_seen:
        stream.body_seen, stream.body_quiet_since = received, now
    elif now - stream.body_quiet_since > pace.timeout:
        return pace.stalled("the request")
    return pace.too_slow("the request") if pace.overdue(due, received, now) else ""
