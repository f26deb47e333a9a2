"""OpenTelemetry spans from a real server (--otel-exporter console: one JSON line per span on
stderr): a W3C traceparent sent over HTTP (httpx) and gRPC metadata (grpcio) is honoured, each
request has its SERVER span and each model execution a child span; off, nothing is installed."""

from __future__ import annotations

import http.server
import json
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import EXAMPLES
from tests.integration.oip_grpc_support import infer_half_plus_two
from tests.serverproc import ServerProcess, served, start_server, stop_cleanly, wait_for

TIMEOUT_S = 30.0
HTTP_TRACE, HTTP_PARENT = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
GRPC_TRACE, GRPC_PARENT = "0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331"


def traceparent(trace: str, parent: str) -> str:
    return f"00-{trace}-{parent}-01"


@pytest.fixture(scope="module")
def traced(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    repo = tmp_path_factory.mktemp("traced")
    shutil.copytree(EXAMPLES / "half_plus_two", repo / "half_plus_two")
    yield from served(start_server(repo, "--otel-exporter", "console"))


def printed(server: ServerProcess) -> list[dict[str, Any]]:
    """The spans the server has printed so far (its readiness probes' too)."""
    lines = list(server.lines)
    return [json.loads(line) for line in lines if line.startswith("{") and '"context"' in line]


def spans_from(
    server: ServerProcess, first: int, arrived: Callable[[list[dict[str, Any]]], bool]
) -> list[dict[str, Any]]:
    """The spans printed from the ``first`` on, once what a test needs has ``arrived``: a span
    reaches ``server.lines`` through a pipe and the reading thread, some time after the client
    has its answer (a gRPC call's span ends only after its trailers are sent); a count of spans
    would also take in others' (the readiness probe's span comes first)."""
    found: list[dict[str, Any]] = []

    def check() -> bool:
        found[:] = printed(server)[first:]
        return arrived(found)

    wait_for(check, TIMEOUT_S)
    return found


def by_name(found: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    return [s for s in found if s["name"] == name]


def executed(found: list[dict[str, Any]]) -> set[str]:
    """The traces in which both the request's span and its model execution's have arrived."""
    requests = {s["context"]["trace_id"] for s in found if s["kind"] == "SpanKind.SERVER"}
    return requests & {s["context"]["trace_id"] for s in by_name(found, "execute half_plus_two")}


def test_traceparent_is_honoured_over_http_and_grpc(traced: ServerProcess) -> None:
    before = len(printed(traced))
    body = {"inputs": [{"name": "x", "datatype": "FP32", "shape": [1], "data": [1.0]}]}
    headers = {"traceparent": traceparent(HTTP_TRACE, HTTP_PARENT)}
    url = f"{traced.http_url}/v2/models/half_plus_two/infer"
    assert httpx.post(url, json=body, headers=headers, timeout=TIMEOUT_S).is_success
    metadata = (("traceparent", traceparent(GRPC_TRACE, GRPC_PARENT)),)
    infer_half_plus_two(traced.grpc_address, metadata, TIMEOUT_S)
    assert httpx.post(url, json=body, timeout=TIMEOUT_S).is_success  # no traceparent: a root
    sent = {"0x" + HTTP_TRACE, "0x" + GRPC_TRACE}
    found = spans_from(traced, before, lambda found: sent < executed(found))  # and the root's

    (http,) = [s for s in by_name(found, "POST /v2/models/half_plus_two/infer") if s["parent_id"]]
    assert http["context"]["trace_id"] == "0x" + HTTP_TRACE
    assert http["parent_id"] == "0x" + HTTP_PARENT
    assert http["kind"] == "SpanKind.SERVER"
    assert http["attributes"]["http.response.status_code"] == 200
    (rpc,) = by_name(found, "inference.GRPCInferenceService/ModelInfer")
    assert rpc["context"]["trace_id"] == "0x" + GRPC_TRACE
    assert rpc["parent_id"] == "0x" + GRPC_PARENT
    assert rpc["attributes"]["rpc.grpc.status_code"] == 0
    executions = by_name(found, "execute half_plus_two")
    assert len(executions) == 3
    for request in (http, rpc):
        (child,) = [s for s in executions if s["parent_id"] == request["context"]["span_id"]]
        assert child["context"]["trace_id"] == request["context"]["trace_id"]
        assert child["attributes"]["model.version"] == "123"
        assert child["attributes"]["rosettaserve.outcome"] == "success"
    (root,) = [
        s for s in by_name(found, "POST /v2/models/half_plus_two/infer") if not s["parent_id"]
    ]
    assert root["context"]["trace_id"] not in ("0x" + HTTP_TRACE, "0x" + GRPC_TRACE)


def test_a_failed_request_has_an_error_span(traced: ServerProcess) -> None:
    before = len(printed(traced))
    url = f"{traced.http_url}/v2/models/half_plus_two/infer"
    assert httpx.post(url, content=b"{", timeout=TIMEOUT_S).status_code == 400
    name = "POST /v2/models/half_plus_two/infer"
    found = spans_from(traced, before, lambda found: bool(by_name(found, name)))
    (span,) = by_name(found, name)
    assert span["attributes"]["http.response.status_code"] == 400
    assert not by_name(found, "execute half_plus_two")  # it never reached the model


def test_off_by_default_nothing_is_installed(tmp_path: Path) -> None:
    script = (
        "import sys\n"
        "from rosettaserve.server.server import Server\n"
        "from rosettaserve.server.settings import Settings\n"
        f"server = Server(Settings(repository={str(tmp_path)!r}))\n"
        "assert server.tracing is None and server._grpc_server().tracing is None\n"
        "assert type(server.dataplane.observer).__name__ == 'Metrics'\n"
        "assert type(server.http_app).__name__ in ('HttpApp', 'HttpEdge')\n"
        "assert not [m for m in sys.modules if m.startswith('opentelemetry')]\n"
        "print('off')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        check=False,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )
    assert done.stdout.strip() == "off", done.stderr


class Collector(http.server.BaseHTTPRequestHandler):
    """An OTLP/HTTP receiver: keeps every export request's body."""

    bodies: list[bytes] = []

    def do_POST(self) -> None:
        size = int(self.headers.get("content-length", "0"))
        body = self.rfile.read(size)
        if self.path == "/v1/traces":
            Collector.bodies.append(body)
        self.send_response(200)
        self.send_header("content-type", "application/x-protobuf")
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


def test_otlp_sends_the_spans_to_the_collector(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )

    collector = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Collector)
    threading.Thread(target=collector.serve_forever, daemon=True).start()
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", f"http://127.0.0.1:{collector.server_port}")
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "50")  # export within 50 ms
    monkeypatch.setenv("OTEL_SERVICE_NAME", "traced-test")
    shutil.copytree(EXAMPLES / "half_plus_two", tmp_path / "half_plus_two")
    server = start_server(tmp_path, "--otel-exporter", "otlp")
    try:
        body = {"inputs": [{"name": "x", "datatype": "FP32", "shape": [1], "data": [1.0]}]}
        url = f"{server.http_url}/v2/models/half_plus_two/infer"
        headers = {"traceparent": traceparent(HTTP_TRACE, HTTP_PARENT)}
        assert httpx.post(url, json=body, headers=headers, timeout=TIMEOUT_S).is_success
        names: dict[str, bytes] = {}
        service = ""
        deadline = time.monotonic() + TIMEOUT_S
        while len(names) < 2 and time.monotonic() < deadline:
            for raw in list(Collector.bodies):
                export = ExportTraceServiceRequest.FromString(raw)
                for resource_spans in export.resource_spans:
                    for attr in resource_spans.resource.attributes:
                        if attr.key == "service.name":
                            service = attr.value.string_value
                    for scope in resource_spans.scope_spans:
                        names.update({s.name: s.trace_id for s in scope.spans})
            time.sleep(0.05)
    finally:
        stop_cleanly(server)
        collector.shutdown()
    assert service == "traced-test"
    assert names["POST /v2/models/half_plus_two/infer"] == bytes.fromhex(HTTP_TRACE)
    assert names["execute half_plus_two"] == bytes.fromhex(HTTP_TRACE)
