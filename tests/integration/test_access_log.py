"""The server's log as an operator reads it, on a real server: an access line per request (HTTP
and gRPC), request ids echoed or made and in every line of their request, a model's failure
with its traceback (once) while the client gets the short message, a load failure's traceback,
and the JSON format."""

from __future__ import annotations

import json
import re
import socket
from collections.abc import Iterator
from pathlib import Path

import grpc
import httpx
import pytest

from rosettaserve.protocols.oip.pb import grpc_service_pb2 as pb
from tests.integration.logs_support import lines_after, logs_repo, wait_for_lines
from tests.serverproc import ServerProcess, served, start_server

MADE_ID = re.compile(r"^[0-9a-f]{12}-[0-9a-f]+$")
INFER_DOC = {"inputs": [{"name": "INPUT0", "shape": [1, 2], "datatype": "FP32", "data": [1, 2]}]}
MODEL_INFER = "/inference.GRPCInferenceService/ModelInfer"


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return logs_repo(tmp_path_factory.mktemp("logs_repo"))


@pytest.fixture(scope="module")
def server(repo: Path) -> Iterator[ServerProcess]:
    yield from served(start_server(repo, "--no-strict-readiness"))


@pytest.fixture(scope="module")
def http(server: ServerProcess) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.http_url, timeout=30.0) as client:
        yield client


def infer(http: httpx.Client, model: str, request_id: str | None = None) -> httpx.Response:
    headers = {} if request_id is None else {"X-Request-ID": request_id}
    return http.post(f"/v2/models/{model}/infer", json=INFER_DOC, headers=headers)


def access_lines(server: ServerProcess, request_id: str, count: int = 1) -> list[str]:
    return wait_for_lines(
        server,
        lambda line: "rosettaserve.access:" in line and line.endswith(" " + request_id),
        count,
    )


# -- HTTP --------------------------------------------------------------------------------------


def test_an_http_request_has_its_access_line_with_the_id_it_sent(
    server: ServerProcess, http: httpx.Client
) -> None:
    response = infer(http, "identity", "client-id-1")
    assert response.status_code == 200
    assert response.headers["x-request-id"] == "client-id-1"
    (line,) = access_lines(server, "client-id-1")
    fields = line.split("rosettaserve.access: ")[1].split()
    assert fields[:5] == [
        "http",
        "POST",
        "/v2/models/identity/infer",
        "200",
        str(len(response.content)),
    ]
    assert re.fullmatch(r"\d+\.\d{3}ms", fields[5]), line
    assert " INFO " in line


def test_a_request_without_an_id_gets_a_new_one_each(
    server: ServerProcess, http: httpx.Client
) -> None:
    ids = [infer(http, "identity").headers["x-request-id"] for _ in range(3)]
    assert all(MADE_ID.match(i) for i in ids), ids
    assert len(set(ids)) == 3
    for made in ids:
        access_lines(server, made)


@pytest.mark.parametrize("sent", ["x" * 129, "two words", "caf\u00e9".encode().decode("latin-1")])
def test_an_unfit_request_id_is_replaced(http: httpx.Client, sent: str) -> None:
    response = http.get("/v2/health/live", headers={"X-Request-ID": sent.encode("latin-1")})
    assert response.status_code == 200
    assert MADE_ID.match(response.headers["x-request-id"]), response.headers


def test_a_request_id_of_128_printable_characters_is_kept(http: httpx.Client) -> None:
    sent = "A-z0~!" * 21 + "xy"
    assert len(sent) == 128
    response = http.get("/v2/health/live", headers={"X-Request-ID": sent})
    assert response.headers["x-request-id"] == sent


def test_every_rest_protocol_and_errors_have_access_lines(
    server: ServerProcess, http: httpx.Client
) -> None:
    cases = [
        ("GET", "/v1/models/identity", 200),  # TF Serving
        ("GET", "/v2/models/no_such_model", 404),
        ("DELETE", "/v2/health/live", 405),
    ]
    for n, (method, path, status) in enumerate(cases):
        response = http.request(method, path, headers={"X-Request-ID": f"every-{n}"})
        assert response.status_code == status, response.text
        (line,) = access_lines(server, f"every-{n}")
        assert f" http {method} {path} {status} " in line


def test_a_streamed_answer_is_logged_at_its_end_with_its_bytes(
    server: ServerProcess, http: httpx.Client
) -> None:
    doc = {"str_data": "the quick brown fox", "model": "words_stream_python"}
    url = "/grps/v1/infer/predict?streaming=true"
    with http.stream("POST", url, json=doc, headers={"X-Request-ID": "streamed-1"}) as response:
        body = response.read()
    assert response.status_code == 200
    (line,) = access_lines(server, "streamed-1")
    assert f" 200 {len(body)} " in line


def test_a_failing_predict_logs_its_traceback_once_and_answers_short(
    server: ServerProcess, http: httpx.Client
) -> None:
    response = infer(http, "faulty", "boom-1")
    assert response.status_code == 500
    assert response.json() == {"error": "RuntimeError: the weights are gone (42)"}
    access_lines(server, "boom-1")
    errors = [line for line in server.lines if " ERROR " in line and "request_id=boom-1" in line]
    assert len(errors) == 1, server.lines[-40:]
    assert "rosettaserve.model: model faulty version 1 failed" in errors[0]
    trace = lines_after(server, errors[0], 40)
    assert trace[0] == "Traceback (most recent call last):"
    assert any("in deep_inside" in line for line in trace)
    assert "RuntimeError: the weights are gone (42)" in trace


def test_a_model_rejecting_its_input_is_logged_at_info_without_a_traceback(
    server: ServerProcess, http: httpx.Client
) -> None:
    # the first call runs on the model's thread, the next ones on the event loop (a fast
    # model): in the request's own context either way, each line with its own id
    for n in range(1, 5):
        response = infer(http, "picky", f"picky-{n}")
        assert response.status_code == 400
        access_lines(server, f"picky-{n}")
        (line,) = [line for line in server.lines if f"request_id=picky-{n}" in line]
        assert " INFO rosettaserve.model: model picky version 1 rejected its input" in line
        assert "INPUT0 must be positive" in line
        assert not lines_after(server, line, 1)[0].startswith("Traceback")


def test_a_failed_load_logs_its_traceback(server: ServerProcess) -> None:
    (line,) = wait_for_lines(server, lambda line: "model broken version 1 failed to load" in line)
    assert " ERROR " in line
    assert "OSError: weights.bin: no such device" in line
    trace = lines_after(server, line, 30)
    assert trace[0] == "Traceback (most recent call last):"
    assert any("in open_weights" in t for t in trace)


# -- gRPC --------------------------------------------------------------------------------------


def infer_request(model: str) -> pb.ModelInferRequest:
    request = pb.ModelInferRequest(model_name=model)
    tensor = request.inputs.add(name="INPUT0", datatype="FP32", shape=[1, 2])
    tensor.contents.fp32_contents.extend([1.0, 2.0])
    return request


@pytest.fixture(scope="module")
def model_infer(server: ServerProcess) -> Iterator[grpc.UnaryUnaryMultiCallable]:
    with grpc.insecure_channel(server.grpc_address) as channel:
        yield channel.unary_unary(
            MODEL_INFER,
            request_serializer=pb.ModelInferRequest.SerializeToString,
            response_deserializer=pb.ModelInferResponse.FromString,
        )


def test_a_grpc_call_echoes_its_id_in_initial_metadata_and_has_its_access_line(
    server: ServerProcess, model_infer: grpc.UnaryUnaryMultiCallable
) -> None:
    reply, call = model_infer.with_call(
        infer_request("identity"), metadata=[("x-request-id", "grpc-id-1")], timeout=30
    )
    assert reply.model_name == "identity"
    assert ("x-request-id", "grpc-id-1") in call.initial_metadata()
    (line,) = access_lines(server, "grpc-id-1")
    fields = line.split("rosettaserve.access: ")[1].split()
    assert fields[:4] == ["grpc", MODEL_INFER, "identity", "0"]
    assert int(fields[4]) == len(reply.SerializeToString())


def test_a_grpc_line_names_the_model_and_version_the_request_names(
    server: ServerProcess, model_infer: grpc.UnaryUnaryMultiCallable
) -> None:
    """ModelInfer (read from its bytes) and a request message with ``name``/``version``
    (ModelMetadata) alike; a call naming no model (ServerLive) has "-"."""
    request = infer_request("identity")
    request.model_version = "1"
    model_infer(request, metadata=[("x-request-id", "grpc-version")], timeout=30)
    (line,) = access_lines(server, "grpc-version")
    assert f" {MODEL_INFER} identity/1 0 " in line
    with grpc.insecure_channel(server.grpc_address) as channel:
        metadata = channel.unary_unary(
            "/inference.GRPCInferenceService/ModelMetadata",
            request_serializer=pb.ModelMetadataRequest.SerializeToString,
            response_deserializer=pb.ModelMetadataResponse.FromString,
        )
        metadata(pb.ModelMetadataRequest(name="identity"), metadata=[("x-request-id", "md")])
        live = channel.unary_unary(
            "/inference.GRPCInferenceService/ServerLive",
            request_serializer=pb.ServerLiveRequest.SerializeToString,
            response_deserializer=pb.ServerLiveResponse.FromString,
        )
        live(pb.ServerLiveRequest(), metadata=[("x-request-id", "live")], timeout=30)
    (line,) = access_lines(server, "md")
    assert " /inference.GRPCInferenceService/ModelMetadata identity 0 " in line
    (line,) = access_lines(server, "live")
    assert " /inference.GRPCInferenceService/ServerLive - 0 " in line


def test_a_grpc_call_without_an_id_gets_one(
    server: ServerProcess, model_infer: grpc.UnaryUnaryMultiCallable
) -> None:
    _, call = model_infer.with_call(infer_request("identity"), timeout=30)
    made = dict(call.initial_metadata())["x-request-id"]
    assert MADE_ID.match(made)
    access_lines(server, made)


def test_a_failing_predict_over_grpc_is_logged_with_the_call_id(
    server: ServerProcess, model_infer: grpc.UnaryUnaryMultiCallable
) -> None:
    with pytest.raises(grpc.RpcError) as failed:
        model_infer(infer_request("faulty"), metadata=[("x-request-id", "grpc-boom")], timeout=30)
    error = failed.value
    assert error.code() == grpc.StatusCode.INTERNAL
    assert error.details() == "RuntimeError: the weights are gone (42)"
    metadata = [*error.initial_metadata(), *error.trailing_metadata()]
    assert ("x-request-id", "grpc-boom") in metadata
    (line,) = access_lines(server, "grpc-boom")
    assert f" {MODEL_INFER} faulty 13 " in line
    errors = [line for line in server.lines if " ERROR " in line and "request_id=grpc-boom" in line]
    assert len(errors) == 1
    assert lines_after(server, errors[0], 1) == ["Traceback (most recent call last):"]


# -- requests the HTTP/1.1 server refuses itself ----------------------------------------------


def refused_line(server: ServerProcess, request: bytes) -> tuple[list[str], bytes]:
    """Send ``request`` on a new connection; the access line of its refusal (fields after the
    logger's name) and the answer's bytes."""
    host, port = server.http_hostport.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(request)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    body = answer.split(b"\r\n\r\n", 1)[1]
    status = answer.split(b" ", 2)[1].decode()
    marker = f" {status} {len(body)} "
    (line,) = wait_for_lines(
        server,
        lambda line: "rosettaserve.access: http" in line and marker in line and line.endswith(" -"),
    )
    return line.split("rosettaserve.access: ")[1].split(), body


@pytest.mark.parametrize(
    ("request_bytes", "method", "path", "status"),
    [
        (b"BREW /pot HTTP/1.1\r\nHost: t\r\n\r\n", "BREW", "-", "501"),
        (b"GET /v2 HTTP/2.0\r\nHost: t\r\n\r\n", "GET", "/v2", "505"),
        (b"GET /x\x01y HTTP/1.1\r\n\r\n", "-", "-", "400"),
    ],
    ids=["unknown-method", "http-2.0", "malformed"],
)
def test_a_request_refused_before_any_application_has_its_access_line(
    server: ServerProcess, request_bytes: bytes, method: str, path: str, status: str
) -> None:
    fields, body = refused_line(server, request_bytes)
    assert fields[0] == "http"
    assert fields[3:5] == [status, str(len(body))]
    assert fields[-1] == "-"  # no request id: no application saw it
    if method != "-":
        assert fields[1:3] == [method, path]


def test_a_refused_target_is_cut_in_its_line(server: ServerProcess) -> None:
    """A 414: the target as far as it arrived, cut at 256 bytes."""
    fields, _ = refused_line(server, b"GET /" + b"a" * (20 << 10) + b" HTTP/1.1\r\n\r\n")
    assert fields[1:4] == ["GET", "/" + "a" * 255 + "...", "414"]


# -- JSON and off ------------------------------------------------------------------------------


def test_json_lines_carry_the_access_fields_and_the_request_id(repo: Path) -> None:
    server = start_server(repo, "--log-format", "json", "--no-strict-readiness")
    try:
        with httpx.Client(base_url=server.http_url, timeout=30.0) as http:
            assert infer(http, "identity", "json-1").status_code == 200
            assert infer(http, "faulty", "json-2").status_code == 500
        wait_for_lines(server, lambda line: '"request_id":"json-2"' in line, 2)
    finally:
        assert server.stop() == 0
    docs = [json.loads(line) for line in server.lines if line.startswith("{")]
    (access,) = [
        d for d in docs if d["logger"] == "rosettaserve.access" and d["request_id"] == "json-1"
    ]
    assert set(access) >= {"ts", "level", "logger", "msg", "request_id"}
    assert access["level"] == "INFO"
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", access["ts"])
    assert (access["protocol"], access["method"], access["path"], access["status"]) == (
        "http",
        "POST",
        "/v2/models/identity/infer",
        200,
    )
    assert isinstance(access["bytes"], int)
    assert isinstance(access["duration_ms"], float)
    (failure,) = [d for d in docs if d["level"] == "ERROR" and d["request_id"] == "json-2"]
    assert failure["logger"] == "rosettaserve.model"
    assert "Traceback" in failure["exc"]
    assert "deep_inside" in failure["exc"]
    (load,) = [d for d in docs if "failed to load" in d["msg"]]
    assert "open_weights" in load["exc"]
    assert load["request_id"] is None


def test_no_access_log_means_no_lines_and_no_request_ids(repo: Path) -> None:
    server = start_server(repo, "--no-access-log", "--no-strict-readiness")
    try:
        with httpx.Client(base_url=server.http_url, timeout=30.0) as http:
            response = infer(http, "identity", "quiet-1")
            assert response.status_code == 200
            assert "x-request-id" not in response.headers
            assert infer(http, "faulty").status_code == 500
        wait_for_lines(server, lambda line: "model faulty version 1 failed" in line)
    finally:
        assert server.stop() == 0
    assert not [line for line in server.lines if "rosettaserve.access" in line]


def test_a_grpc_call_refused_before_it_starts_has_its_access_line(server: ServerProcess) -> None:
    with grpc.insecure_channel(server.grpc_address) as channel:
        unknown = channel.unary_unary("/no.Such/Method")
        with pytest.raises(grpc.RpcError) as failed:
            unknown(b"", metadata=[("x-request-id", "grpc-unknown")], timeout=30)
    assert failed.value.code() == grpc.StatusCode.UNIMPLEMENTED
    (line,) = access_lines(server, "grpc-unknown")
    assert " grpc /no.Such/Method - 12 0 " in line
