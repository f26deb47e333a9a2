"""The gRPC transport: one grpc.aio server for every enabled service, one error interceptor."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import grpc

from rosettaserve.core.errors import ServingError

log = logging.getLogger("rosettaserve.grpc")

# service name -> (servicer, {rpc name: (request type, response type, streaming)});
# streaming: False unary, True a stream each way, "server" one request and a stream of replies
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

    @contextmanager
    def busy(self) -> Iterator[None]:
        self.active += 1
        try:
            yield
        finally:
            self.active -= 1

    async def wait_idle(self, timeout: float) -> None:
        deadline = asyncio.get_running_loop().time() + timeout
        while self.active and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.01)


class ErrorInterceptor(grpc.aio.ServerInterceptor):  # type: ignore[misc]
    """Unary rpcs: a ServingError becomes its status code from the shared table."""

    def __init__(self, tracker: CallTracker) -> None:
        self.tracker = tracker

    async def intercept_service(
        self,
        continuation: Callable[[Any], Awaitable[Any]],
        details: Any,
    ) -> Any:
        handler = await continuation(details)
        if handler is not None and handler.unary_stream is not None:
            return handler._replace(unary_stream=self._tracked_stream(handler.unary_stream))
        if handler is None or handler.unary_unary is None:
            return handler
        inner = handler.unary_unary
        tracker = self.tracker

        async def guarded(request: Any, context: Any) -> Any:
            try:
                with tracker.busy():
                    return await inner(request, context)
            except ServingError as exc:
                # e.g. retry-after on RESOURCE_EXHAUSTED, as trailing metadata
                trailers = tuple(exc.headers.items())
                await context.abort(status_code(exc), exc.message, trailing_metadata=trailers)
            except Exception as exc:
                log.exception("unhandled error in %s", details.method)
                await context.abort(grpc.StatusCode.INTERNAL, f"{type(exc).__name__}: {exc}")

        return handler._replace(unary_unary=guarded)

    def _tracked_stream(self, inner: Any) -> Any:
        tracker = self.tracker

        async def tracked(request: Any, context: Any) -> AsyncIterator[Any]:
            with tracker.busy():
                async for reply in inner(request, context):
                    yield reply

        return tracked


def generic_handler(service: ServiceTable) -> Any:
    name, servicer, rpcs = service
    handlers = {}
    for rpc, (request_type, response_type, streaming) in rpcs.items():
        handlers[rpc] = _HANDLER_KINDS[streaming](
            getattr(servicer, rpc),
            request_deserializer=request_type.FromString,
            response_serializer=response_type.SerializeToString,
        )
    return grpc.method_handlers_generic_handler(name, handlers)


def build_server(
    services: list[ServiceTable],
    max_message_size: int,
    tracker: CallTracker,
    reuse_port: bool = False,  # one of several worker processes on the same port
) -> grpc.aio.Server:
    server = grpc.aio.server(
        interceptors=[ErrorInterceptor(tracker)],
        options=[
            ("grpc.max_send_message_length", max_message_size),
            ("grpc.max_receive_message_length", max_message_size),
            ("grpc.so_reuseport", int(reuse_port)),
        ],
    )
    server.add_generic_rpc_handlers([generic_handler(s) for s in services])
    return server
