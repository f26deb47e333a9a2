"""OpenTelemetry tracing (``--otel-exporter console|otlp``; the ``[tracing]`` extra), off by
default.

Off, nothing of this is imported or installed: the HTTP port answers with the application as it
is, the gRPC server's ``tracing`` is None (one attribute test per call) and the data plane's
observer is the metrics registry itself. On:

- a SERVER span per HTTP request and per gRPC call, a child of the client's W3C ``traceparent``
  (HTTP header or gRPC metadata) when it sends one, else the root of a new trace;
- a span per model execution, the request span's child, drawn from the times the data plane
  records anyway (``Call``: queued, ran, done), with the model, version, protocol and outcome.

``console`` writes each span as one JSON line on stderr (for a look, and for the tests);
``otlp`` sends them in batches over OTLP/HTTP to ``OTEL_EXPORTER_OTLP_ENDPOINT`` (default
http://localhost:4318). ``OTEL_SERVICE_NAME`` names the service (default rosettaserve).
"""

from __future__ import annotations

import os
import re
import sys
import time
from collections.abc import AsyncIterator
from contextvars import ContextVar, Token
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

from rosettaserve.core.call import Call
from rosettaserve.core.registry import ModelVersion
from rosettaserve.core.streaming import close_stream
from rosettaserve.observability.trace_settings import TraceSettings
from rosettaserve.web.app import App
from rosettaserve.web.routing import HttpResponse

if TYPE_CHECKING:
    from opentelemetry.context import Context

EXPORTERS = ("none", "console", "otlp")
# the gRPC codes that mark a server span failed (OpenTelemetry's conventions for gRPC)
SERVER_ERRORS = frozenset((2, 4, 12, 13, 14, 15))  # UNKNOWN, DEADLINE_EXCEEDED, UNIMPLEMENTED,
# INTERNAL, UNAVAILABLE, DATA_LOSS
EXTRA = "the [tracing] extra: pip install 'rosettaserve[tracing]'"


# Whether the request being served is traced, when its HTTP route named its model and the trace
# settings decided (None: not decided yet; the model's execution span decides then)
SAMPLED: ContextVar[bool | None] = ContextVar("rosettaserve_trace_sampled", default=None)
# an OIP inference (the requests Triton traces; its other model routes are not sampled)
_INFER_PATH = re.compile(r"/v2/models/([^/]+)(?:/versions/[0-9]+)?/infer")


class Tracing:
    """The tracer provider of this process, and the wrappers that make its spans."""

    def __init__(self, exporter: str, settings: TraceSettings | None = None) -> None:
        self.settings = settings or TraceSettings(exporting=True)  # the trace extension's
        try:
            from opentelemetry.propagate import extract
            from opentelemetry.sdk.resources import Resource
            from opentelemetry.sdk.trace import TracerProvider
            from opentelemetry.sdk.trace.export import (
                BatchSpanProcessor,
                ConsoleSpanExporter,
                SimpleSpanProcessor,
            )
        except ImportError as exc:
            raise SystemExit(f"--otel-exporter {exporter} needs {EXTRA} ({exc})") from None
        name = os.environ.get("OTEL_SERVICE_NAME") or "rosettaserve"
        self.provider = TracerProvider(resource=Resource.create({"service.name": name}))
        if exporter == "console":
            console = ConsoleSpanExporter(out=sys.stderr, formatter=_one_line)
            self.provider.add_span_processor(SimpleSpanProcessor(console))
        else:
            try:
                from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
                    OTLPSpanExporter,
                )
            except ImportError as exc:
                raise SystemExit(f"--otel-exporter otlp needs {EXTRA} ({exc})") from None
            self.provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
        self.tracer = self.provider.get_tracer("rosettaserve")
        self.extract = extract  # W3C trace context (and baggage) from headers or metadata
        self.epoch_offset = time.time_ns() - time.perf_counter_ns()  # perf_counter -> epoch

    def shutdown(self) -> None:
        """Export what is still buffered."""
        self.provider.shutdown()

    def http(self, app: App) -> TracedApp:
        return TracedApp(app, self)

    def observer(self, metrics: Any) -> TracedObserver:
        return TracedObserver(metrics, self)

    def call_span(self, rpc: str, metadata: list[tuple[str, str]]) -> CallSpan | None:
        if self.settings.effective()["trace_level"] == ["OFF"]:
            return None
        return CallSpan(self, rpc, metadata)

    def request_sampled(self, path: str) -> bool | None:
        """An HTTP request's decision: its model's settings for an OIP inference, else whether
        the server's level traces at all (None: its model execution's span decides)."""
        found = _INFER_PATH.fullmatch(path)
        if found is not None:
            return self.settings.sampled(unquote(found.group(1)))
        return None if self.settings.effective()["trace_level"] != ["OFF"] else False

    def server_span(self, name: str, carrier: dict[str, str], attributes: dict[str, Any]) -> Any:
        from opentelemetry.trace import SpanKind

        parent = self.extract(carrier)
        return self.tracer.start_span(
            name, context=parent, kind=SpanKind.SERVER, attributes=attributes
        )


def _one_line(span: Any) -> str:
    return str(span.to_json(indent=None)) + "\n"


def _enter(span: Any) -> Token[Context]:
    from opentelemetry import context, trace

    return context.attach(trace.set_span_in_context(span))


def _leave(token: Token[Context]) -> None:
    from opentelemetry import context

    context.detach(token)


def _end(span: Any, failed: bool, description: str = "") -> None:
    if failed:
        from opentelemetry.trace import Status, StatusCode

        span.set_status(Status(StatusCode.ERROR, description))
    span.end()


class TracedApp:
    """The HTTP application with a span around each request (the current span while it runs)."""

    def __init__(self, app: App, tracing: Tracing) -> None:
        self.app, self.tracing = app, tracing

    async def respond(
        self, method: str, raw_url: bytes, headers: dict[str, str], body: bytes | bytearray
    ) -> HttpResponse:
        target = raw_url.decode("latin-1")
        path = target.split("?", 1)[0]
        sampled = self.tracing.request_sampled(path)
        if sampled is False:  # not traced: no span, nor one for its model's execution
            decided = SAMPLED.set(False)
            try:
                return await self.app.respond(method, raw_url, headers, body)
            finally:
                SAMPLED.reset(decided)
        attributes = {"http.request.method": method, "url.path": path, "rpc.system": "http"}
        span = self.tracing.server_span(f"{method} {path}", headers, attributes)
        token, decided = _enter(span), SAMPLED.set(sampled)
        try:
            response = await self.app.respond(method, raw_url, headers, body)
        except BaseException as exc:
            span.record_exception(exc)
            _end(span, True, type(exc).__name__)
            raise
        finally:
            SAMPLED.reset(decided)
            _leave(token)
        span.set_attribute("http.response.status_code", response.status)
        if response.stream is None:
            _end(span, response.status >= 500)
        else:
            response.stream = _ended_at_its_end(response.stream, span, response.status >= 500)
        return response


async def _ended_at_its_end(stream: AsyncIterator[bytes], span: Any, failed: bool) -> Any:
    try:
        async for chunk in stream:
            yield chunk
    finally:
        await close_stream(stream)
        _end(span, failed)


class CallSpan:
    """One gRPC call's span: begun with the call, current in its context, ended with its status."""

    __slots__ = ("span",)

    def __init__(self, tracing: Tracing, rpc: str, metadata: list[tuple[str, str]]) -> None:
        carrier = dict(metadata)
        attributes = {"rpc.system": "grpc", "rpc.method": rpc}
        self.span = tracing.server_span(rpc.lstrip("/"), carrier, attributes)

    def enter(self) -> None:
        """Make it the current span (in the call's own context, a copy made for the call)."""
        _enter(self.span)

    def finished(self, code: int) -> None:
        self.span.set_attribute("rpc.grpc.status_code", code)
        _end(self.span, code in SERVER_ERRORS, f"grpc status {code}")


class TracedObserver:
    """The metrics registry's observer, plus a span per model execution (when the request
    reached the model), drawn afterwards from the times its ``Call`` holds."""

    def __init__(self, metrics: Any, tracing: Tracing) -> None:
        self.metrics, self.tracing = metrics, tracing

    def observe(self, mv: ModelVersion, protocol: str, outcome: str, call: Call, end: int) -> None:
        self.metrics.observe(mv, protocol, outcome, call, end)
        ran = call.ran
        if not ran:
            return
        sampled = SAMPLED.get()
        if not (self.tracing.settings.sampled(mv.name) if sampled is None else sampled):
            return
        offset = self.tracing.epoch_offset
        attributes: dict[str, str | int] = {
            "model.name": mv.name,
            "model.version": mv.version,
            "rosettaserve.protocol": protocol or "other",
            "rosettaserve.outcome": outcome,
            "rosettaserve.queue_us": max(ran - call.submitted, 0) // 1000,
            "rosettaserve.batch_size": call.batch_size or 1,
        }
        span = self.tracing.tracer.start_span(
            f"execute {mv.name}", start_time=ran + offset, attributes=attributes
        )
        if outcome not in ("success", "cancelled"):
            from opentelemetry.trace import Status, StatusCode

            span.set_status(Status(StatusCode.ERROR, outcome))
        span.end(end_time=max(call.done or end, ran) + offset)
