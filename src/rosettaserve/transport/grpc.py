"""The gRPC transport: every enabled service on one port, over our own HTTP/2 (``h2``).

A servicer method is ``async def Rpc(self, request, context)``: it returns the reply (unary), or
is an async generator of replies (server streaming), or takes an async iterator of requests and
yields replies (a stream each way). ``ServingError`` becomes its status code from core's one
table, with its headers as trailing metadata; anything else becomes INTERNAL.

Why not grpcio's server: a small call cost far more server CPU in grpc.aio [cost: grpc-aio],
most of it in switches between grpc core's threads and the event loop's; here a call is read,
answered and written on the event loop (a call: ``grpc_call``), and a unary call to a fast model
runs without a task (``eager``). What is served: unary, server-streaming and bidirectional calls;
``grpc-timeout`` (the call is cancelled and ends with DEADLINE_EXCEEDED); request messages
compressed with gzip or deflate (replies are not compressed); message size limits checked on
the 5-byte prefix, before the message is buffered; a request that comes too slowly ends with
DEADLINE_EXCEEDED (``--body-timeout``, ``--body-min-rate``: ``h2_stalls``); TLS (ALPN h2)
when the server is started with a certificate (rosettaserve.security). Not served: h2c upgrade.
"""

from __future__ import annotations

import ssl
import time
import zlib
from collections.abc import Callable
from typing import Any

from rosettaserve.core.errors import ServingError
from rosettaserve.core.share import HEADER, Share, edge
from rosettaserve.core.status import ErrorKind
from rosettaserve.transport.body_pace import BodyPace
from rosettaserve.transport.defaults import DEFAULT_SEND_TIMEOUT
from rosettaserve.transport.grpc_call import (
    ACCEPT_ENCODING,
    INTERNAL,
    INVALID_ARGUMENT,
    UNAUTHENTICATED,
    UNIMPLEMENTED,
    Call,
    RequestStream,
    trailers,
    trailers_only,
)
from rosettaserve.transport.grpc_context import Context
from rosettaserve.transport.h2 import Connection
from rosettaserve.transport.h2_server import H2Server
from rosettaserve.transport.h2_stream import CLOCK_STOPPED, Receiver, Stream
from rosettaserve.transport.h2_wire import NO_ERROR
from rosettaserve.transport.hpack import encode
from rosettaserve.transport.observers import CallLines, CallTracing
from rosettaserve.web.grpc_services import CallTracker, ServiceTable
from rosettaserve.web.keys import KeyCheck

_WBITS = {"gzip": 16 + zlib.MAX_WBITS, "deflate": zlib.MAX_WBITS}
_TIMEOUT_UNITS = {"H": 3600.0, "M": 60.0, "S": 1.0, "m": 1e-3, "u": 1e-6, "n": 1e-9}


class Method:
    __slots__ = ("fn", "kind", "model_of", "name", "read", "write")

    def __init__(
        self,
        name: str,
        fn: Callable[..., Any],
        kind: bool | str,
        read: Callable[[bytes], Any] | None,
        write: Callable[[Any], bytes] | None,
        *,
        model_of: Callable[[Any], str] | None = None,
    ) -> None:
        self.name, self.fn, self.kind, self.read, self.write = name, fn, kind, read, write
        self.model_of = model_of  # the model a request names, for its access line


def methods_of(services: list[ServiceTable]) -> dict[str, Method]:
    """``/service/rpc`` -> how to call it."""
    table: dict[str, Method] = {}
    for name, servicer, rpcs in services:
        for rpc, (request_type, response_type, streaming) in rpcs.items():
            path = f"/{name}/{rpc}"
            table[path] = Method(
                path,
                getattr(servicer, rpc),
                streaming,
                None if request_type is bytes else request_type.FromString,
                None if response_type is bytes else response_type.SerializeToString,
                model_of=getattr(servicer, "model_of", None),
            )
    return table


class Refused:
    """The receiver of a stream answered before it started (an unknown method, bad headers):
    what the client still sends on it is dropped."""

    def received(self, data: bytes, end_stream: bool) -> None:
        pass

    def cancelled(self) -> None:
        pass

    def late(self, reason: str) -> None:
        pass


_REFUSED = Refused()


class GrpcServer:
    """The gRPC port: ``H2Server`` with each stream opened as a ``Call``."""

    def __init__(
        self,
        services: list[ServiceTable],
        max_message_size: int,
        tracker: CallTracker,
        send_timeout: float = DEFAULT_SEND_TIMEOUT,
        pace: BodyPace | None = None,
    ) -> None:
        self.methods = methods_of(services)
        self.max_message_size = max_message_size
        self.tracker = tracker
        self.h2 = H2Server(self, send_timeout=send_timeout, pace=pace)
        self.guard: KeyCheck | None = None  # set: calls need an API key (security.keys)
        self.call_lines: CallLines | None = None  # set: an access line per call, request ids
        self.tracing: CallTracing | None = None  # set: a span per call (--otel-exporter)

    def open(self, conn: Connection, stream: Stream, headers: list[tuple[str, str]]) -> Receiver:
        path = method = content_type = ""
        timeout = encoding = ""
        priority: str | None = None
        metadata: list[tuple[str, str]] = []
        for name, value in headers:
            if name.startswith(":"):
                if name == ":path":
                    path = value
                elif name == ":method":
                    method = value
            elif name == "content-type":
                content_type = value
            elif name == "grpc-timeout":
                timeout = value
            elif name == "grpc-encoding":
                encoding = value
            elif name == HEADER:
                priority = value
            elif name not in ("te", "user-agent", "grpc-accept-encoding"):
                metadata.append((name, value))
        refusal = _refusal(method, content_type)
        if refusal is not None:
            status, code, message = refusal
            block = encode([(":status", status), ("content-type", "application/grpc")])
            return _refuse(conn, stream, block + trailers(code, message))
        found = self.methods.get(path)
        if found is None:
            message = f"Method not found: {path}"
            return self._refused(conn, stream, UNIMPLEMENTED, message, (path, metadata))
        shared = None
        if self.guard is not None or priority is not None:
            try:
                shared = self._share(path, metadata, priority)
            except ServingError as exc:
                code = (
                    UNAUTHENTICATED if exc.kind is ErrorKind.UNAUTHENTICATED else INVALID_ARGUMENT
                )
                return self._refused(conn, stream, code, exc.message, (path, metadata))
        wbits = 0
        if encoding and encoding != "identity":
            wbits = _WBITS.get(encoding, -1)
            if wbits < 0:
                message = f"grpc-encoding {encoding} is not supported (use {ACCEPT_ENCODING})"
                return self._refused(conn, stream, UNIMPLEMENTED, message, (path, metadata))
        deadline = None
        if timeout:
            seconds = _timeout_seconds(timeout)
            if seconds is None:
                message = f"malformed grpc-timeout: {timeout!r}"
                return self._refused(conn, stream, INTERNAL, message, (path, metadata))
            deadline = time.monotonic() + seconds
        call = Call(
            self, conn, stream, found, context=Context(deadline, tuple(metadata)), wbits=wbits
        )
        call.share = shared
        return self._begun(call, path, metadata)

    def _begun(self, call: Call, path: str, metadata: list[tuple[str, str]]) -> Call:
        """``call`` with its access line and span; a bidirectional stream's started."""
        if self.call_lines is not None:
            call.record = self.call_lines(path, metadata)
        if self.tracing is not None:
            call.span = self.tracing.call_span(path, metadata)
        if call.method.kind is True:
            call.requests = RequestStream(call.conn, call.stream)
            call.stream.body_due = CLOCK_STOPPED  # timed per message (Call._time_messages)
            call.start(call._bidi())
        return call

    def _share(
        self, path: str, metadata: list[tuple[str, str]], priority: str | None
    ) -> Share | None:
        """The call's tenant (API keys: rosettaserve.security) and priority in the queues
        (core/share.py); Unauthenticated: no valid key, InvalidInput: a malformed x-priority."""
        tenant = None
        if self.guard is not None:
            tenant = self.guard.admits_grpc(path, metadata)
            if tenant is None:
                raise self.guard.refusal()
        return edge(tenant, priority)

    def _refused(
        self,
        conn: Connection,
        stream: Stream,
        code: int,
        message: str,
        call: tuple[str, list[tuple[str, str]]],
    ) -> Receiver:
        """A call answered with ``code`` before it started; its access line (``call``: its
        path and metadata)."""
        if self.call_lines is not None:
            self.call_lines(*call).finished(code)
        return _refuse(conn, stream, trailers_only(code, message))

    async def start(self, sock: Any, tls: ssl.SSLContext | None = None) -> None:
        await self.h2.start(sock, tls)

    async def stop(self, grace: float) -> None:
        """Refuse new calls, let calls at work finish (up to ``grace``), then close everything,
        streams left open and idle included."""
        self.h2.stop_accepting()
        await self.tracker.wait_idle(grace)
        self.h2.close_all()


def _refuse(conn: Connection, stream: Stream, block: bytes) -> Receiver:
    """Answer at once and end the stream; a reset tells the client to stop sending on it."""
    conn.send_headers(stream, block, end_stream=True)
    if not stream.remote_closed:
        conn.reset(stream.id, NO_ERROR)
    return _REFUSED


def _refusal(method: str, content_type: str) -> tuple[str, int, str] | None:
    if method != "POST":
        return "405", INTERNAL, f"gRPC calls are POST requests, not {method or 'none'}"
    if not content_type.startswith("application/grpc"):
        shown = content_type or "none"
        return "415", INTERNAL, f"content-type {shown} is not application/grpc"
    return None


def _timeout_seconds(value: str) -> float | None:
    digits, unit = value[:-1], value[-1:]
    if not (digits.isascii() and digits.isdigit()) or len(digits) > 8 or unit not in _TIMEOUT_UNITS:
        return None
    return int(digits) * _TIMEOUT_UNITS[unit]
