"""What the transports ask of whoever watches them: the access line of a request the HTTP/1.1
server refuses itself, the access line and the span of a gRPC call. Declared here, so the
transports do not depend on their watchers; rosettaserve.observability implements them
(``access_log.AccessLog`` and ``CallRecord``, ``tracing.Tracing`` and ``CallSpan``) and the
server sets them. None set: nothing of it runs (one attribute test per request)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol


class RefusalLog(Protocol):
    def refused(self, method: str, url: bytes, status: int, nbytes: int) -> None:
        """A request answered before any application saw it (400, 408, 413, ...)."""
        ...


class CallLine(Protocol):
    """One gRPC call's access line, from its headers to its status."""

    request_id: str  # sent back in the reply's metadata
    sent: int  # bytes of reply messages, counted by the call

    def named(self, model_of: Callable[[Any], str] | None, request: Any) -> None:
        """A request of the call arrived (``model_of``: its service's, to name the model)."""
        ...

    def finished(self, code: int) -> None: ...


# a call's access line from its path and metadata (``access_log.call_lines``): called as it is
# for every call, no method in between
CallLines = Callable[[str, list[tuple[str, str]]], CallLine]


class CallSpan(Protocol):
    def enter(self) -> None:
        """Make it the current span (run in the call's own context)."""
        ...

    def finished(self, code: int) -> None: ...


class CallTracing(Protocol):
    def call_span(self, rpc: str, metadata: list[tuple[str, str]]) -> CallSpan | None:
        """None: this call is not traced (the trace settings say so)."""
        ...
