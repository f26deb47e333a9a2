"""The answering half of an HTTP/1.1 connection: requests answered in order, one answer each,
written with the loop's round of reads (``coalesce``), reading paused while the client does not
take its answers, and the close after a refusal.

Responses leave together: those answered while the event loop handles one round of reads are
written once that round is over, each connection's in one ``writelines`` (one writev: heads and
bodies together). A request the server refuses is answered after the answers before it; then
the connection's output half is closed at once and the connection a little later, once the
client has had time to read its answer (what it still sends is discarded, unparsed).
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
from collections import deque
from collections.abc import Awaitable
from typing import Any, Final, Protocol

from rosettaserve.core.run_at_once import Resumable
from rosettaserve.core.share import DEFAULT, SHARE
from rosettaserve.core.streaming import close_stream
from rosettaserve.transport.coalesce import WriteRound
from rosettaserve.transport.eager import FINISHED, Adopted
from rosettaserve.transport.h1_framing import CHUNKED, CONTINUE, LENGTH, UNTIL_CLOSE, head
from rosettaserve.web.app import App
from rosettaserve.web.routing import HttpResponse

log = logging.getLogger("rosettaserve.http")

# Final: compiled, these are constants, not a lookup in the module's dict [cost: final-static]
MAX_PIPELINE: Final = 32  # requests queued behind one being answered before reading stops
MAX_DISCARD_BYTES = 64 * 1024 * 1024  # what a refused client may go on sending before the close
LINGER_S = 5.0  # how long a refused client has to read its answer before the close
# answers held for the end of the round at most: the loop may read a socket many times in one
# round (libuv reads up to 32 times while data is there), and a client pipelining without
# reading must meet the high-water mark before all of that is answered
MAX_OUT_PARTS: Final = 256
HELD_PIPELINE: Final = 1  # why reading is paused: requests queued,
HELD_WRITES: Final = 2  # answers unread
HELD_ALL: Final = HELD_PIPELINE | HELD_WRITES


class Pending:
    __slots__ = ("answer", "body", "error", "headers", "keep_alive", "legacy", "method", "url")

    def __init__(
        self, method: str, url: bytes, headers: dict[str, str], body: bytes | bytearray
    ) -> None:
        self.method, self.url, self.headers, self.body = method, url, headers, body
        self.keep_alive = True
        self.legacy = False  # an HTTP/1.0 request
        self.error: HttpResponse | None = None  # set: the answer, a refusal
        self.answer: HttpResponse | None = None  # the application's, once ``_respond`` has it


class Serving:
    """What the answers of every connection share with the server."""

    def __init__(self, app: App) -> None:
        self.app = app
        self.round = WriteRound()  # the answers of this round of reads (``coalesce``)
        self.closing = False  # the server shuts down: each answer says "close"


class Reading(Protocol):
    """The reading half of the connection, as its answers see it (``h1.Connection``)."""

    def hold(self, reason: int) -> None:
        """Stop reading (``HELD_*``: why), until released for every reason."""

    def release(self, reason: int) -> None:
        """Read again, unless held for another reason."""

    def answered(self) -> None:
        """The answers owed are given: the connection is idle from now."""


class Answers:
    """What a connection owes its client: answers, in order (``h1.Connection`` reads, and
    holds one of these)."""

    def __init__(self, serving: Serving, reading: Reading) -> None:
        self.serving, self.reading = serving, reading
        self.transport: asyncio.Transport | None = None
        self.queue: deque[Pending] = deque()
        self.queue_full = False  # reading is held until the queue is down to half
        # the task answering (or a Resumable future a handler waits for: ``_resume``)
        self.task: asyncio.Future[Any] | None = None
        self.first: Adopted[HttpResponse] | None = None  # the task's first handler, until it runs
        # a handler waiting for a Resumable: (handler, its steps, its request, its context)
        self.resumed: tuple[Any, Any, Pending, Any] | None = None
        self.writable = asyncio.Event()  # cleared while the client does not read
        self.writable.set()
        self.out: list[Any] = []  # responses waiting for the end of the loop's round of reads
        self.close_after = False  # the last of them closes the connection
        self.stopped = False  # a request was refused: nothing more is parsed
        self.eof_sent = False
        self.discarded = 0

    def lost(self) -> None:
        """The connection is gone: the work for its answers stops."""
        self.transport = None
        if self.task is not None:
            self.task.cancel()  # the client went away: stop its work
        first, self.first = self.first, None
        if first is not None:  # the task never ran: the handler it was to resume unwinds here
            first.abandon()

    # -- answering -----------------------------------------------------------------------------

    def take(self, pending: Pending) -> None:
        """A whole request is in, and answers before it are on their way: it waits its turn."""
        self.queue.append(pending)
        if len(self.queue) > MAX_PIPELINE and not self.queue_full:
            self.queue_full = True
            self.reading.hold(HELD_PIPELINE)
        if self.task is None:
            self.task = asyncio.get_running_loop().create_task(self._serve_queue())

    def go_on(self) -> None:
        """``100 Continue``, unless answers to earlier requests are still to come (it would be
        read as theirs)."""
        transport = self.transport
        if transport is not None and self.task is None and not self.queue:
            self.flush()
            transport.write(CONTINUE)

    def answer_eagerly(self, pending: Pending) -> None:
        """Run the handler at once, up to its first wait (core/run_at_once.py's first step,
        inline: not a call through ``EagerDriver`` a request). Most requests (a fast model) need
        none: the response is written here, without a task. Otherwise a task takes the handler
        over where it stopped, and answers the requests pipelined behind it after it."""
        handler = self._respond(pending)
        context = contextvars.copy_context()  # the task that may take over runs in it too
        steps = handler.__await__()
        # next() with a default: a handler that ends in its first step does not raise its
        # StopIteration into this compiled function, whose catching of it (traceback entry,
        # exception state saved and restored) [cost: stop-iteration]
        self._went_on(handler, steps, context.run(next, steps, FINISHED), pending, context)

    def _went_on(
        self, handler: Any, steps: Any, waits_for: Any, pending: Pending, context: Any
    ) -> None:
        """A handler driven outside a task answered (``waits_for`` is FINISHED), waits for a
        batch's result (a Resumable future: ``_resume`` drives it on when it is done), or waits
        for something else: a task takes it over."""
        if type(waits_for) is Resumable:
            waits_for._asyncio_future_blocking = False  # (as the task awaiting it would)
            self.task, self.resumed = waits_for, (handler, steps, pending, context)
            waits_for.add_done_callback(self._resume, context=context)
            return
        if waits_for is FINISHED:
            response = pending.answer
            assert response is not None
            if response.stream is None:
                self._write(response, pending)
                return
            first: Awaitable[HttpResponse] = _ready(response)
        else:
            first = self.first = Adopted(handler, waits_for)
        self.task = asyncio.get_running_loop().create_task(
            self._serve_queue((first, pending)), context=context
        )

    def _resume(self, future: asyncio.Future[Any]) -> None:
        """A batched request's result is in (or the client left: the future was cancelled): its
        handler goes on from here, in the request's context, and its answer is written as one
        given in the first step is: no task per request, made at its first wait and woken by
        the batch [cost: batched-eager]."""
        resumed, self.resumed, self.task = self.resumed, None, None
        assert resumed is not None
        handler, steps, pending, context = resumed
        try:
            if future.cancelled():  # connection_lost, or the request's deadline (a bounded
                waits_for = steps.throw(asyncio.CancelledError())  # wait): it unwinds as in a task
            else:
                waits_for = next(steps, FINISHED)
        except StopIteration:  # it answered the cancel (a deadline's 504): written if it can be
            if self.transport is None:
                return
            waits_for = FINISHED
        except asyncio.CancelledError:
            return
        except Exception:
            log.exception("answering a request failed; closing the connection")
            self.close()
            return
        self._went_on(handler, steps, waits_for, pending, context)
        if self.task is None:  # answered: the requests that came in meanwhile, in order
            if self.queue:
                self.task = asyncio.get_running_loop().create_task(self._serve_queue())
            elif self.stopped:
                self.close_after = True
                self.flush()
            self.reading.answered()

    async def _respond(self, pending: Pending) -> HttpResponse:
        """The application's answer, kept in ``pending`` too (``answer_eagerly`` reads it)."""
        app = self.serving.app
        pending.answer = answer = await app.respond(
            pending.method, pending.url, pending.headers, pending.body
        )
        return answer

    async def _serve_queue(
        self, first: tuple[Awaitable[HttpResponse], Pending] | None = None
    ) -> None:
        """Answer the queued requests in order (after ``first``: a response on its way)."""
        self.first = None  # running: the handler is driven (and cancelled) from here
        try:
            if first is not None and not await self._answer(await first[0], first[1]):
                return
            app = self.serving.app
            while self.queue:
                pending = self.queue.popleft()
                if self.queue_full and len(self.queue) < MAX_PIPELINE // 2:
                    self.queue_full = False
                    self.reading.release(HELD_PIPELINE)
                if pending.error is not None:
                    response = pending.error
                else:  # (in this task's context: what the last one set is taken back)
                    SHARE.set(DEFAULT)
                    response = await app.respond(
                        pending.method, pending.url, pending.headers, pending.body
                    )
                if not await self._answer(response, pending):
                    return
            if self.stopped:  # the last answer is given
                self.close_after = True
                self.flush()
            self.reading.answered()
        finally:
            self.task = None

    async def _answer(self, response: HttpResponse, pending: Pending) -> bool:
        """Send it; False when the connection is done with (closed, or not kept alive)."""
        if self.transport is None or self.close_after:  # an answer before it said "close"
            return False
        if response.stream is None:
            return self._write(response, pending)
        keep_alive = pending.keep_alive and not self.serving.closing
        keep_alive = await self._write_stream(response, pending, keep_alive)
        if not keep_alive:
            self.close_after = True
            self.flush()
        return keep_alive and self.transport is not None

    def _write(self, response: HttpResponse, pending: Pending) -> bool:
        """Head and body to ``out``, written with the loop's next flush; False when the
        connection is closed after it. The answer to HEAD is the head alone."""
        if self.transport is None or self.close_after:
            return False
        keep_alive = pending.keep_alive and not self.serving.closing
        if not self.out:
            self.serving.round.add(self)
        if pending.method == "HEAD":
            self.out.append(head(response, keep_alive, LENGTH, pending.legacy))
        else:
            self.out += [
                head(response, keep_alive, LENGTH, pending.legacy),
                response.body,
                *response.tail,
            ]
        if not keep_alive:
            self.close_after = True
        elif len(self.out) > MAX_OUT_PARTS:  # a burst of pipelined requests: write them now,
            self.flush()  # so that a client reading nothing stops being read (pause_writing)
        return keep_alive

    def flush(self) -> None:
        """Write the responses in ``out`` (and close, if the last one said so): before anything
        written at once, which must not overtake them."""
        out, self.out = self.out, []
        transport = self.transport
        if transport is None or transport.is_closing():  # the client left, or aborted: drop
            return
        if out:
            transport.writelines(out)
        if self.close_after:
            if self.stopped:
                self._linger(transport)
            else:
                transport.close()

    async def _write_stream(
        self, response: HttpResponse, pending: Pending, keep_alive: bool
    ) -> bool:
        """One write per item, waiting while the client is slow: chunked transfer encoding, or
        for an HTTP/1.0 client the bytes as they are, ended by the close."""
        stream = response.stream
        assert stream is not None
        assert self.transport is not None
        self.flush()
        legacy = pending.legacy
        framing = UNTIL_CLOSE if legacy else CHUNKED
        keep_alive = keep_alive and not legacy
        self.transport.write(head(response, keep_alive, framing, legacy))
        if pending.method == "HEAD":
            await close_stream(stream)
            return keep_alive
        try:
            async for chunk in stream:
                if self.transport is None:
                    return False
                if chunk:
                    if legacy:
                        self.transport.write(chunk)
                    else:
                        self.transport.writelines([b"%x\r\n" % len(chunk), chunk, b"\r\n"])
                    await self.writable.wait()
        except Exception:
            log.exception("a streaming response failed midway; closing the connection")
            return False
        if self.transport is not None and not legacy:
            self.transport.write(b"0\r\n\r\n")
        return keep_alive

    def refused(self, pending: Pending | None) -> None:
        """The last answer, a refusal (None: the answers given or on their way are the last):
        the connection closes after it, and nothing more the client sends is parsed."""
        self.stopped = True
        if pending is None:
            if self.task is None and not self.queue:
                self.close_after = True
                if not self.out:
                    self.flush()
        elif self.task is not None or self.queue:
            self.queue.append(pending)
        elif pending.error is not None:
            self._write(pending.error, pending)

    def _linger(self, transport: asyncio.Transport) -> None:
        """Close the output half now and the connection a little later: closed outright while
        the client still sends, it could be reset before the client reads its answer."""
        if self.eof_sent:
            return
        self.eof_sent = True
        if not transport.can_write_eof():
            transport.close()
            return
        transport.write_eof()
        self.reading.release(HELD_ALL)  # what the client still sends is read, and discarded
        asyncio.get_running_loop().call_later(LINGER_S, self.close)

    def discard(self, nbytes: int) -> None:
        """Bytes the client sent after a refusal: read, not parsed."""
        self.discarded += nbytes
        if self.discarded > MAX_DISCARD_BYTES:
            self.close()

    # -- closing -------------------------------------------------------------------------------

    def close(self) -> None:
        self.flush()
        if self.transport is not None:
            self.transport.close()

    def abort(self) -> None:
        if self.transport is not None:
            self.transport.abort()

    @property
    def busy(self) -> bool:
        return self.task is not None


async def _ready(response: HttpResponse) -> HttpResponse:
    return response
