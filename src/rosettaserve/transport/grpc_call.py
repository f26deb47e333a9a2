"""One gRPC call on an HTTP/2 stream (``transport/grpc.py`` opens it): its request messages
read off the stream's DATA (their 5-byte prefixes, size limits, gzip/deflate: a compressed
message that inflates to more than ``INLINE_INFLATED`` is inflated on the request-work threads
when the call takes it, ``Compressed``), the servicer's
coroutine run (unary, server-streaming, a stream each way; ``grpc-timeout``), and its replies,
status and trailers written back. What a servicer sees of its call is ``grpc_context``.
"""

from __future__ import annotations

import asyncio
import base64
import contextvars
import logging
import time
import zlib
from collections import deque
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any, Final
from urllib.parse import quote

from rosettaserve.core.errors import ServingError, bounded
from rosettaserve.core.executor import LargeWork, run_request_work
from rosettaserve.core.share import SHARE, Share
from rosettaserve.core.status import ErrorKind
from rosettaserve.core.streaming import close_stream
from rosettaserve.transport.eager import EAGER, FINISHED
from rosettaserve.transport.grpc_context import Aborted, Context
from rosettaserve.transport.h2 import Connection
from rosettaserve.transport.h2_stream import CLOCK_STOPPED, CLOCK_TO_START, Stream
from rosettaserve.transport.h2_wire import NO_ERROR
from rosettaserve.transport.hpack import encode
from rosettaserve.transport.observers import CallLine, CallSpan
from rosettaserve.web.content_coding import INLINE_INFLATED
from rosettaserve.web.request_id import HEADER, REQUEST_ID

if TYPE_CHECKING:
    from rosettaserve.transport.grpc import GrpcServer, Method

log = logging.getLogger("rosettaserve.grpc")

# the transport's own statuses, their codes from core's one table (Final: compiled, constants
# or C statics, not a lookup in the module's dict) [cost: final-static]
OK: Final = 0
CANCELLED: Final = ErrorKind.CANCELLED.grpc
INVALID_ARGUMENT: Final = ErrorKind.INVALID_ARGUMENT.grpc
DEADLINE_EXCEEDED: Final = ErrorKind.DEADLINE_EXCEEDED.grpc
RESOURCE_EXHAUSTED: Final = ErrorKind.PAYLOAD_TOO_LARGE.grpc
UNIMPLEMENTED: Final = ErrorKind.UNIMPLEMENTED.grpc
INTERNAL: Final = ErrorKind.INTERNAL.grpc
UNAUTHENTICATED: Final = ErrorKind.UNAUTHENTICATED.grpc

ACCEPT_ENCODING: Final = "identity,deflate,gzip"
_REPLY_HEADERS: Final = encode(
    [
        (":status", "200"),
        ("content-type", "application/grpc"),
        ("grpc-accept-encoding", ACCEPT_ENCODING),
    ]
)
_OK_TRAILERS: Final = encode([("grpc-status", "0")])
_PREFIX: Final = b"\x00"
DEADLINE_GRACE_S: Final = 0.02
SUBSCRIPTION: Final = "subscription"  # a server stream waiting for events: not counted busy
QUEUE_HIGH: Final = 32  # a streaming call's unread requests: hold,
QUEUE_LOW: Final = 8  # then reopen


def trailers(code: int, message: str, extra: tuple[tuple[str, str], ...] = ()) -> bytes:
    fields = [("grpc-status", str(code))]
    if message:
        # percent-encoded as the gRPC spec asks: what is not printable ASCII, and "%"
        fields.append(("grpc-message", quote(message, safe=" !\"#$&'()*+,-./:;<=>?@[\\]^_`{|}~")))
    for name, value in extra:
        key = name.lower()
        if key.endswith("-bin") and not isinstance(value, str):
            fields.append((key, base64.b64encode(value).decode().rstrip("=")))
        else:  # header values are ASCII: anything else would not encode
            fields.append((key, str(value).encode("ascii", "replace").decode()))
    return encode(fields)


def trailers_only(code: int, message: str, extra: tuple[tuple[str, str], ...] = ()) -> bytes:
    return _REPLY_HEADERS + trailers(code, message, extra)


class RequestStream:
    """The requests of a call that streams them: an async iterator the servicer reads. When
    QUEUE_HIGH of them wait unread, the stream's flow-control window stays shut until the
    servicer is down to QUEUE_LOW."""

    def __init__(self, conn: Connection, stream: Stream) -> None:
        self.conn, self.stream = conn, stream
        self.items: deque[Any] = deque()
        self.ended = False
        self.waiter: asyncio.Future[None] | None = None

    def put(self, item: Any) -> None:
        self.items.append(item)
        if len(self.items) >= QUEUE_HIGH and not self.stream.held:
            self.conn.hold(self.stream, True)
        self._wake()

    def end(self) -> None:
        self.ended = True
        self._wake()

    def _wake(self) -> None:
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_result(None)

    def __aiter__(self) -> RequestStream:
        return self

    async def __anext__(self) -> Any:
        while not self.items:
            if self.ended:
                raise StopAsyncIteration
            self.waiter = asyncio.get_running_loop().create_future()
            await self.waiter
        item = self.items.popleft()
        if self.stream.held and len(self.items) <= QUEUE_LOW:
            self.conn.hold(self.stream, False)
        if type(item) is Compressed:
            return await item.request()
        return item


class Compressed:
    """A compressed request message too large to inflate on the event loop: inflated and read
    on the request-work threads when its call takes it (its order among the call's messages
    kept); Aborted with the call's status when it cannot be."""

    __slots__ = ("call", "message")

    def __init__(self, call: Call, message: bytes) -> None:
        self.call, self.message = call, message

    async def request(self) -> Any:
        request = await run_request_work(self.call.decoded, self.message, None)
        self.call.named(request)
        return request


class Call:
    """One stream of the connection: a gRPC call, from its headers to its trailers."""

    def __init__(
        self,
        server: GrpcServer,
        conn: Connection,
        stream: Stream,
        method: Method,
        *,
        context: Context,
        wbits: int,
    ) -> None:
        self.server, self.conn, self.stream, self.method = server, conn, stream, method
        self.context = context
        self.wbits = wbits  # 0: messages are not compressed
        self.chunks: list[bytes] = []  # the start of a message still arriving
        self.have = 0
        self.need = 0
        self.messages: list[Any] = []
        self.requests: RequestStream | None = None
        self.task: asyncio.Task[None] | None = None
        self.timer: asyncio.TimerHandle | None = None
        self.headers_sent = False
        self.done = False
        self.record: CallLine | None = None  # set: the access log is on
        self.span: CallSpan | None = None  # set: --otel-exporter (observability/tracing.py)
        self.share: Share | None = None  # set: its key's tenant, its x-priority (core/share.py)

    # -- receiving -----------------------------------------------------------------------------

    def received(self, data: bytes, end_stream: bool) -> None:
        if self.done:
            return
        if self.chunks:  # a message arriving in pieces: joined once, when it is whole
            self.chunks.append(data)
            self.have += len(data)
            if self.have < self.need and not end_stream:
                return
            data = b"".join(self.chunks)
            self.chunks = []
        pos, size = 0, len(data)
        while size - pos >= 5:
            length = int.from_bytes(data[pos + 1 : pos + 5], "big")
            if length > self.server.max_message_size:
                self.finish(
                    RESOURCE_EXHAUSTED,
                    f"Received message larger than max ({length} vs. "
                    f"{self.server.max_message_size})",
                )
                self.conn.reset(self.stream.id, NO_ERROR)  # stop the client's upload
                return
            end = pos + 5 + length
            if end > size:
                break
            if not self._message(data[pos], data[pos + 5 : end]):
                return
            pos = end
        if pos < size:
            rest = data[pos:]
            self.chunks = [rest]
            self.have = len(rest)
            self.need = 5 if len(rest) < 5 else 5 + int.from_bytes(rest[1:5], "big")
        if self.requests is not None:
            self._time_messages(pos > 0)
        if end_stream:
            self._ended()

    def _time_messages(self, completed: bool) -> None:
        """A call that streams its requests is timed while a message is on its way, from its
        first bytes (``h2_stalls``): the clock stops between messages, and starts again for
        each (``completed``: messages ended in this DATA)."""
        stream = self.stream
        if not self.chunks:
            stream.body_due = CLOCK_STOPPED
        elif completed or stream.body_due == CLOCK_STOPPED:
            stream.body_due = CLOCK_TO_START

    def _message(self, flag: int, message: bytes) -> bool:
        """One whole request message; False when the call failed on it."""
        if flag:
            return self._compressed(message, flag)
        read = self.method.read
        if read is not None:
            try:
                request = read(message)
            except Exception as exc:
                self.finish(INVALID_ARGUMENT, bounded(f"the request is not a valid message: {exc}"))
                return False
        else:
            request = message
        if self.record is not None:  # the access line names the model
            self.record.named(self.method.model_of, request)
        if self.requests is not None:
            self.requests.put(request)
        else:
            self.messages.append(request)
        return True

    def _compressed(self, message: bytes, flag: int) -> bool:
        if flag != 1 or not self.wbits:
            self.finish(INTERNAL, "a compressed message without a grpc-encoding")
            return False
        try:
            request = self.decoded(message, INLINE_INFLATED)
        except LargeWork:
            self._take(Compressed(self, message))  # inflated when the call takes it
            return True
        except Aborted as exc:
            self.finish(exc.code, exc.details)
            return False
        self.named(request)
        self._take(request)
        return True

    def _take(self, request: Any) -> None:
        if self.requests is not None:
            self.requests.put(request)
        else:
            self.messages.append(request)

    def named(self, request: Any) -> None:
        if self.record is not None:  # the access line names the model
            self.record.named(self.method.model_of, request)

    def decoded(self, message: bytes, budget: int | None) -> Any:
        """A compressed request message inflated and read; LargeWork once it inflates to more
        than ``budget``; Aborted (the call's status) when it cannot be."""
        limit = self.server.max_message_size
        within = limit if budget is None else min(limit, budget)
        inflater = zlib.decompressobj(self.wbits)
        try:
            inflated = inflater.decompress(message, within + 1)
        except zlib.error as exc:
            raise Aborted(INTERNAL, f"the message could not be decompressed: {exc}", ()) from None
        if len(inflated) > within or inflater.unconsumed_tail:
            if within < limit:
                raise LargeWork
            too_large = f"a decompressed message larger than max ({limit} bytes)"
            raise Aborted(RESOURCE_EXHAUSTED, too_large, ())
        read = self.method.read
        if read is None:
            return inflated
        try:
            return read(inflated)
        except Exception as exc:
            invalid = bounded(f"the request is not a valid message: {exc}")
            raise Aborted(INVALID_ARGUMENT, invalid, ()) from None

    def _ended(self) -> None:
        if self.chunks:
            self.finish(INTERNAL, "the request ended inside a message")
            return
        if self.requests is not None:
            self.requests.end()
            return
        if len(self.messages) != 1:
            self.finish(
                UNIMPLEMENTED if self.messages else INTERNAL,
                f"{self.method.name} takes one request message, got {len(self.messages)}",
            )
            return
        request = self.messages.pop()
        if self.method.kind is False:
            self.start(self._unary(request))
        elif self.method.kind == SUBSCRIPTION:
            self.start(self._replies(self.method.fn(request, self.context)))
        else:
            self.start(self._server_stream(request))

    def late(self, reason: str) -> None:
        """The request came too slowly (``h2_stalls``): the call ends, saying why."""
        self.finish(DEADLINE_EXCEEDED, reason)

    def cancelled(self) -> None:
        """The client reset the stream or left: the work is dropped."""
        self.done = True
        if self.requests is not None:
            self.requests.end()
        self._stop_work()

    # -- running -------------------------------------------------------------------------------

    def start(self, coroutine: Any) -> None:
        """Run it at once, up to its first wait; a task takes it over from there."""
        context = contextvars.copy_context()
        if self.record is not None:  # the call's log lines carry its request id
            context.run(REQUEST_ID.set, self.record.request_id)
        if self.span is not None:  # the model's span is a child of the call's
            context.run(self.span.enter)
        if self.share is not None:  # its place in the queues
            context.run(SHARE.set, self.share)
        waits_for = EAGER.first_step(coroutine, context)
        if waits_for is FINISHED:
            return
        # (a task cancelled before it ran still ends the work: transport/eager.py)
        self.task = EAGER.adopt(coroutine, waits_for, context)
        deadline = self.context.deadline
        if deadline is not None and not self.done:
            # a little after the deadline: work bounded by it (the data plane's request
            # timeout) ends first, with its own, more telling, message
            delay = max(0.0, deadline - time.monotonic()) + DEADLINE_GRACE_S
            self.timer = asyncio.get_running_loop().call_later(delay, self._expire)

    def _expire(self) -> None:
        self.timer = None
        if not self.done:
            self.finish(DEADLINE_EXCEEDED, "Deadline Exceeded")

    def _stop_work(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        task, self.task = self.task, None
        if task is not None and task is not asyncio.current_task():
            task.cancel()

    async def _unary(self, request: Any) -> None:
        with self.server.tracker.busy():
            try:
                if type(request) is Compressed:
                    request = await request.request()
                self.reply(await self.method.fn(request, self.context))
            except BaseException as exc:  # a reply that cannot be written too: INTERNAL
                self._failed(exc)
                return
        self.finish(OK, "")

    async def _server_stream(self, request: Any) -> None:
        with self.server.tracker.busy():
            if type(request) is Compressed:
                try:
                    request = await request.request()
                except BaseException as exc:
                    self._failed(exc)
                    return
            await self._replies(self.method.fn(request, self.context))

    async def _bidi(self) -> None:
        assert self.requests is not None
        await self._replies(self.method.fn(self.requests, self.context))

    async def _replies(self, replies: AsyncIterator[Any]) -> None:
        # written without ``return`` in ``except`` and ``await`` in ``finally``: compiled by
        # mypyc, that form left a stream whose first step failed without its trailers
        failure: BaseException | None = None
        try:
            async for reply in replies:
                if self.done:
                    break
                self.reply(reply)
                await self.conn.drain(self.stream)
        except BaseException as exc:
            failure = exc
        # a call ended or cancelled between two replies leaves the servicer's generator
        # suspended at a ``yield``: closed now, its ``with`` blocks (the count of busy calls)
        # end now, not whenever the garbage collector finds it
        await close_stream(replies)
        if failure is not None:
            self._failed(failure)
        else:
            self.finish(OK, "")

    def _failed(self, exc: BaseException) -> None:
        if isinstance(exc, ServingError):
            extra = tuple(exc.headers.items())
            self.finish(exc.kind.grpc, exc.message, extra)
        elif isinstance(exc, Aborted):
            self.finish(exc.code, exc.details, exc.trailing)
        elif isinstance(exc, asyncio.CancelledError):
            if not self.done:
                self.finish(CANCELLED, "the call was cancelled")
            raise exc
        elif isinstance(exc, Exception):
            log.exception("unhandled error in %s", self.method.name)
            self.finish(INTERNAL, bounded(f"{type(exc).__name__}: {exc}"))
        else:
            raise exc

    # -- answering -----------------------------------------------------------------------------

    def reply(self, reply: Any) -> None:
        if self.done:
            return
        write = self.method.write
        data = write(reply) if write is not None else reply
        size = len(data)
        if size > self.server.max_message_size:
            self.finish(
                RESOURCE_EXHAUSTED,
                f"the reply of {size} bytes is larger than max ({self.server.max_message_size})",
            )
            return
        record = self.record
        if not self.headers_sent:
            self.headers_sent = True
            if record is None:
                self.conn.send_headers(self.stream, _REPLY_HEADERS)
            else:  # the request id, in the initial metadata
                self.conn.send_headers(self.stream, _REPLY_HEADERS + _id_field(record))
        if record is not None:
            record.sent += size
        self.conn.send_data(self.stream, _PREFIX + size.to_bytes(4, "big") + data)

    def finish(self, code: int, message: str, extra: tuple[tuple[str, str], ...] = ()) -> None:
        """The call's status: trailers (or trailers-only, before any reply); the work stops."""
        if self.done:
            return
        self.done = True
        record = self.record
        if self.headers_sent:
            block = _OK_TRAILERS if code == OK and not extra else trailers(code, message, extra)
            self.conn.send_trailers(self.stream, block)
        else:
            if record is not None:  # trailers-only: the request id among them
                extra = (*extra, (HEADER, record.request_id))
            self.conn.send_headers(self.stream, trailers_only(code, message, extra), True)
        if record is not None:
            record.finished(code)
        if self.span is not None:
            self.span.finished(code)
        if self.requests is not None:
            self.requests.end()
        self._stop_work()


# the request id's header field, a literal without indexing: its name part made once
_ID_NAME: Final = encode([(HEADER, "")])[:-1]


def _id_field(record: CallLine) -> bytes:
    value = record.request_id.encode("latin-1")
    if len(value) < 0x7F:  # the length fits the string's 7-bit prefix
        return _ID_NAME + bytes((len(value),)) + value
    return encode([(HEADER, record.request_id)])
