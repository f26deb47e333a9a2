"""The gRPC transport: one grpc.aio server for every enabled service, one error interceptor."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

import grpc

from rosettaserve.core.errors import ServingError

log = logging.getLogger("rosettaserve.grpc")

# service name -> (servicer, {rpc name: (request type, response type, streaming)})
ServiceTable = tuple[str, Any, dict[str, tuple[Any, Any, bool]]]


def status_code(exc: ServingError) -> grpc.StatusCode:
    return grpc.StatusCode[exc.kind.value.grpc_name]


class ErrorInterceptor(grpc.aio.ServerInterceptor):  # type: ignore[misc]
    """Unary rpcs: a ServingError becomes its status code from the shared table."""

    async def intercept_service(
        self,
        continuation: Callable[[Any], Awaitable[Any]],
        details: Any,
    ) -> Any:
        handler = await continuation(details)
        if handler is None or handler.unary_unary is None:
            return handler
        inner = handler.unary_unary

        async def guarded(request: Any, context: Any) -> Any:
            try:
                return await inner(request, context)
            except ServingError as exc:
                await context.abort(status_code(exc), exc.message)
            except Exception as exc:
                log.exception("unhandled error in %s", details.method)
                await context.abort(grpc.StatusCode.INTERNAL, f"{type(exc).__name__}: {exc}")

        return handler._replace(unary_unary=guarded)


def generic_handler(service: ServiceTable) -> Any:
    name, servicer, rpcs = service
    handlers = {}
    for rpc, (request_type, response_type, streaming) in rpcs.items():
        make = (
            grpc.stream_stream_rpc_method_handler
            if streaming
            else grpc.unary_unary_rpc_method_handler
        )
        handlers[rpc] = make(
            getattr(servicer, rpc),
            request_deserializer=request_type.FromString,
            response_serializer=response_type.SerializeToString,
        )
    return grpc.method_handlers_generic_handler(name, handlers)


def build_server(services: list[ServiceTable], max_message_size: int) -> grpc.aio.Server:
    server = grpc.aio.server(
        interceptors=[ErrorInterceptor()],
        options=[
            ("grpc.max_send_message_length", max_message_size),
            ("grpc.max_receive_message_length", max_message_size),
            ("grpc.so_reuseport", 0),
        ],
    )
    server.add_generic_rpc_handlers([generic_handler(s) for s in services])
    return server
