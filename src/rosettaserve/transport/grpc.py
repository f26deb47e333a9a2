"""The gRPC transport: one grpc.aio server for every enabled service, errors mapped in one place."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any

import grpc

from rosettaserve.core.errors import ServingError

log = logging.getLogger("rosettaserve.grpc")

# service name -> (servicer, {rpc name: (request type, response type, streaming)});
# streaming: False unary, True a stream each way, "server" one request and a stream of replies;
# a type given as ``bytes``: the servicer takes or returns the serialized message itself
ServiceTable = tuple[str, Any, Mapping[str, tuple[Any, Any, bool | str]]]
_HANDLER_KINDS = {
    False: grpc.unary_unary_rpc_method_handler,
    True: grpc.stream_stream_rpc_method_handler,
    "server": grpc.unary_stream_rpc_method_handler,
}


def status_code(exc: ServingError) -> grpc.StatusCode:
    return grpc.StatusCode[exc.kind.value.grpc_name]


class CallTracker:
    """Counts calls doing work, so shutdown waits for them but not for idle open streams."""

    def __init__(self) -> None:
        self.active = 0

    def busy(self) -> CallTracker:
        """``with tracker.busy():`` counts a call doing work (the tracker is its own context
        manager: cheaper per call than a generator-based one)."""
        return self

    def __enter__(self) -> None:
        self.active += 1

    def __exit__(self, *exc: object) -> None:
        self.active -= 1

    async def wait_idle(self, timeout: float) -> None:
        deadline = asyncio.get_running_loop().time() + timeout
        while self.active and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.01)


def guarded(method: str, inner: Callable[[Any, Any], Awaitable[Any]], tracker: CallTracker) -> Any:
    """A unary rpc whose ServingError becomes its status code from the shared table."""

    async def call(request: Any, context: Any) -> Any:
        try:
            with tracker.busy():
                return await inner(request, context)
        except ServingError as exc:
            # e.g. retry-after on RESOURCE_EXHAUSTED, as trailing metadata
            trailers = tuple(exc.headers.items())
            await context.abort(status_code(exc), exc.message, trailing_metadata=trailers)
        except Exception as exc:
            log.exception("unhandled error in %s", method)
            await context.abort(grpc.StatusCode.INTERNAL, f"{type(exc).__name__}: {exc}")

    return call


def tracked(inner: Callable[[Any, Any], AsyncIterator[Any]], tracker: CallTracker) -> Any:
    """A server-streaming rpc that holds shutdown back while it streams."""

    async def call(request: Any, context: Any) -> AsyncIterator[Any]:
        with tracker.busy():
            async for reply in inner(request, context):
                yield reply

    return call


def generic_handler(service: ServiceTable, tracker: CallTracker) -> Any:
    """The service's rpcs, each wrapped once here (an interceptor would wrap on every call):
    unary ones map errors to status codes; bidirectional streams report errors in-band."""
    name, servicer, rpcs = service
    handlers = {}
    for rpc, (request_type, response_type, streaming) in rpcs.items():
        fn = getattr(servicer, rpc)
        if streaming is False:
            fn = guarded(f"/{name}/{rpc}", fn, tracker)
        elif streaming == "server":
            fn = tracked(fn, tracker)
        handlers[rpc] = _HANDLER_KINDS[streaming](
            fn,
            request_deserializer=None if request_type is bytes else request_type.FromString,
            response_serializer=None if response_type is bytes else response_type.SerializeToString,
        )
    return grpc.method_handlers_generic_handler(name, handlers)


def build_server(
    services: list[ServiceTable],
    max_message_size: int,
    tracker: CallTracker,
    reuse_port: bool = False,  # one of several worker processes on the same port
) -> grpc.aio.Server:
    server = grpc.aio.server(
        options=[
            ("grpc.max_send_message_length", max_message_size),
            ("grpc.max_receive_message_length", max_message_size),
            ("grpc.so_reuseport", int(reuse_port)),
        ],
    )
    server.add_generic_rpc_handlers([generic_handler(s, tracker) for s in services])
    return server
