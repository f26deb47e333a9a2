"""The gRPC port driven at the HTTP/2 level: frames sent and seen one by one (tests/integration/
h2client.py, on python-hyper's h2 and a plain socket), the well-formed calls and the malformed ones
no gRPC library would send.

After every bad input, the server must still answer a good ModelInfer on a new connection, and,
when the error was the stream's own, on the same connection too. Where the gRPC spec or RFC 9113
leaves the server a choice, a test asserts the outcome this server chose and prints it
(``pytest -s``); the docstrings also name what grpc.aio (grpc core) answers, the server this
project used before its own.
"""

from __future__ import annotations

import gzip
import socket
import time

import h2.errors
import h2.settings
import numpy as np
import pytest

from rosettaserve.protocols.health.pb import health_pb2
from rosettaserve.protocols.oip.pb import grpc_service_pb2 as pb
from rosettaserve.server.settings import DEFAULT_GRPC_MAX_MESSAGE_SIZE
from tests.integration.h2client import (
    CONTINUATION,
    DATA,
    HEADERS,
    TIMEOUT_S,
    ConnectionGone,
    H2Client,
    Reply,
    frame_names,
    grpc_frame,
    literal_never_indexed,
    raw_frame,
    recut_headers,
    split_frames,
)
from tests.serverproc import ServerProcess

INFER = "/inference.GRPCInferenceService/ModelInfer"
HEALTH = "/grpc.health.v1.Health/Check"
OK, DEADLINE_EXCEEDED, RESOURCE_EXHAUSTED, INVALID_ARGUMENT, UNIMPLEMENTED = 0, 4, 8, 3, 12
GOOD = np.arange(8, dtype=np.float32).reshape(2, 4)
MiB = 1 << 20


# -- helpers ------------------------------------------------------------------------------------


def infer_request(values: np.ndarray, model: str = "identity_fp32", **params: float) -> bytes:
    """A serialized ModelInferRequest: ``values`` as INPUT0 (FP32) in raw_input_contents."""
    request = pb.ModelInferRequest(model_name=model)
    request.inputs.add(name="INPUT0", datatype="FP32", shape=list(values.shape))
    request.raw_input_contents.append(values.astype("<f4").tobytes())
    for key, value in params.items():
        request.parameters[key].double_param = value
    return bytes(request.SerializeToString())


def echoes(reply: Reply, values: np.ndarray) -> bool:
    """The reply is a success whose one message carries ``values`` back as OUTPUT0."""
    if not reply.ok or len(reply.messages) != 1:
        return False
    response = pb.ModelInferResponse.FromString(reply.messages[0])
    return (
        [o.name for o in response.outputs] == ["OUTPUT0"]
        and list(response.outputs[0].shape) == list(values.shape)
        and list(response.raw_output_contents) == [values.astype("<f4").tobytes()]
    )


def assert_echoes(reply: Reply, values: np.ndarray) -> None:
    assert reply.ok, reply.describe()
    assert echoes(reply, values), reply.describe()


def serves(client: H2Client) -> None:
    """A good ModelInfer on this connection succeeds."""
    assert_echoes(client.call(INFER, infer_request(GOOD)), GOOD)


def serves_new(server: ServerProcess) -> None:
    """A good ModelInfer on a new connection succeeds."""
    with H2Client(server.grpc_address) as client:
        serves(client)


def record(case: str, outcome: str) -> None:
    print(f"\n[grpc-http2] {case}: {outcome}")


def rng_values(seed: int, n: int) -> np.ndarray:
    return np.random.default_rng(seed).random((1, n), dtype=np.float32)


# -- 1, 2: good calls ---------------------------------------------------------------------------


def test_model_infer_echoes_raw_input(server: ServerProcess) -> None:
    values = rng_values(1, 16)
    with H2Client(server.grpc_address) as client:
        reply = client.call(INFER, infer_request(values))
    assert reply.headers["content-type"].startswith("application/grpc"), reply.headers
    assert (reply.grpc_status, reply.grpc_message) == (OK, ""), reply.describe()
    assert not reply.trailers_only  # the status came as trailers after the message
    assert_echoes(reply, values)


def test_hundred_concurrent_streams_on_one_connection(server: ServerProcess) -> None:
    with H2Client(server.grpc_address) as client:
        allowed = client.conn.remote_settings.max_concurrent_streams
        assert allowed >= 100, f"the server allows {allowed} concurrent streams"
        sent = {}
        for i in range(100):  # all sent before any reply is read
            values = np.arange(i, 2 * i + 3, dtype=np.float32).reshape(1, -1) * (i + 1)
            stream_id = client.start(INFER)
            client.send(stream_id, grpc_frame(infer_request(values)))
            sent[stream_id] = values
        client.read_until(lambda: all(client.replies[s].done for s in sent), timeout=30)
        wrong = [s for s, values in sent.items() if not echoes(client.replies[s], values)]
        assert not wrong, [client.replies[s].describe() for s in wrong]
        serves(client)


# -- 3, 4, 5: unknown methods, oversized and undecodable messages ------------------------------


@pytest.mark.parametrize(
    "path",
    ["/inference.GRPCInferenceService/NoSuchMethod", "/no.such.Service/ModelInfer"],
    ids=["unknown-method", "unknown-service"],
)
def test_unknown_method_or_service_is_unimplemented(server: ServerProcess, path: str) -> None:
    """grpc.aio: HTTP 200, Trailers-Only, grpc-status 12, grpc-message 'Method not found!'."""
    with H2Client(server.grpc_address) as client:
        reply = client.call(path, infer_request(GOOD))
        record(path, reply.describe())
        assert reply.http_status == 200, reply.describe()
        assert reply.grpc_status == UNIMPLEMENTED, reply.describe()
        serves(client)
    serves_new(server)


def test_declared_length_above_max_message_size_is_refused_promptly(
    server: ServerProcess,
) -> None:
    """Only the prefix and a few bytes go: the server must not wait for the declared ones.
    grpc.aio: Trailers-Only grpc-status 8, 'SERVER: Received message larger than max
    (536870913 vs. 536870912)', then RST_STREAM NO_ERROR."""
    declared = DEFAULT_GRPC_MAX_MESSAGE_SIZE + 1
    with H2Client(server.grpc_address) as client:
        stream_id = client.start(INFER)
        started = time.monotonic()
        client.send(
            stream_id, grpc_frame(b"\x0a\x03abc", declared_length=declared), end_stream=False
        )
        reply = client.wait(stream_id, timeout=5)
        elapsed = time.monotonic() - started
        record("declared length above max", f"{reply.describe()} after {elapsed:.2f} s")
        assert reply.grpc_status == RESOURCE_EXHAUSTED, reply.describe()
        assert elapsed < 5
        serves(client)
    serves_new(server)


@pytest.mark.parametrize(
    "payload",
    [b"\xff\xff\xff\xff", b"this is not a protobuf", b"\x0a\xff\xff\xff\xff\x0f"],
    ids=["bad-tag", "text", "bad-length"],
)
def test_bytes_that_are_not_a_request_are_invalid_argument(
    server: ServerProcess, payload: bytes
) -> None:
    """grpc.aio: Trailers-Only grpc-status 3, 'the request is not a valid ModelInferRequest:
    Error parsing message with type 'rosettaserve.inference.ModelInferRequest''."""
    with H2Client(server.grpc_address) as client:
        reply = client.call(INFER, payload)
        record(f"not a request {payload!r}", reply.describe())
        assert reply.grpc_status == INVALID_ARGUMENT, reply.describe()
        assert "ModelInferRequest" in reply.grpc_message, reply.describe()
        serves(client)
    serves_new(server)


# -- 6: compression ----------------------------------------------------------------------------


def test_compressed_flag_without_grpc_encoding_is_an_error(server: ServerProcess) -> None:
    """The spec says INTERNAL. grpc.aio: Trailers-Only grpc-status 13, 'Compression bit set but
    no encoding configured'."""
    with H2Client(server.grpc_address) as client:
        reply = client.call(INFER, gzip.compress(infer_request(GOOD)), compressed=True)
        record("compressed flag, no grpc-encoding", reply.describe())
        assert reply.grpc_status not in (None, OK), reply.describe()
        assert not reply.messages, reply.describe()
        serves(client)
    serves_new(server)


def test_gzip_compressed_request_succeeds(server: ServerProcess) -> None:
    values = rng_values(6, 1000)
    with H2Client(server.grpc_address) as client:
        reply = client.call(
            INFER,
            gzip.compress(infer_request(values)),
            compressed=True,
            extra=[("grpc-encoding", "gzip")],
        )
        assert_echoes(reply, values)


def test_unsupported_grpc_encoding_is_an_error(server: ServerProcess) -> None:
    """The spec says UNIMPLEMENTED. grpc.aio: Trailers-Only grpc-status 13 INTERNAL, "Error
    parsing 'grpc-encoding' metadata" (the same with the compressed flag 0)."""
    with H2Client(server.grpc_address) as client:
        reply = client.call(
            INFER,
            gzip.compress(infer_request(GOOD)),
            compressed=True,
            extra=[("grpc-encoding", "br")],
        )
        record("grpc-encoding: br", reply.describe())
        assert reply.grpc_status == UNIMPLEMENTED, reply.describe()
        assert "identity,deflate,gzip" in reply.grpc_message
        assert not reply.messages, reply.describe()
        serves(client)
    serves_new(server)


# -- 7, 8: flow control ------------------------------------------------------------------------


@pytest.mark.parametrize("window", [65535, 4096])
def test_response_larger_than_the_client_window(server: ServerProcess, window: int) -> None:
    """The client's windows stay small (the connection's is never widened past 65535); h2
    raises FlowControlError if the server sends beyond them."""
    values = rng_values(7, MiB // 4)  # 1 MiB of FP32 each way
    settings: dict[h2.settings.SettingCodes | int, int] = {
        h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: window
    }
    with H2Client(server.grpc_address, settings=settings) as client:
        assert client.conn.local_settings.initial_window_size == window
        reply = client.call(INFER, infer_request(values))
        assert client.conn.inbound_flow_control_window <= 65535
    assert len(reply.body) > MiB
    assert_echoes(reply, values)


@pytest.mark.parametrize("size", [MiB, 8 * MiB], ids=["1MiB", "8MiB"])
def test_request_larger_than_64k(server: ServerProcess, size: int) -> None:
    """Sent within the server's windows (8 MiB: beyond its initial ones, so the client waits
    for its WINDOW_UPDATEs)."""
    values = rng_values(8, size // 4)
    with H2Client(server.grpc_address) as client:
        reply = client.call(INFER, infer_request(values), timeout=30)
        assert_echoes(reply, values)
        serves(client)


# -- 9, 10, 11: ping, deadline, cancellation ---------------------------------------------------


def test_ping_is_acknowledged_with_the_same_bytes(server: ServerProcess) -> None:
    with H2Client(server.grpc_address) as client:
        ack = client.ping(b"\x01rosetta")
        assert ack.ping_data == b"\x01rosetta"
        serves(client)


def test_grpc_timeout_expires_as_deadline_exceeded(server: ServerProcess) -> None:
    """slow_python sleeps 2 s; the call allows 200 ms. grpc.aio: Trailers-Only grpc-status 4,
    "model 'slow_python' version 1 did not answer within the request timeout of 199.1 ms: it
    expired while it ran (its result is discarded)" after about 0.24 s."""
    values = np.ones(4, dtype=np.float32)
    with H2Client(server.grpc_address) as client:
        started = time.monotonic()
        reply = client.call(
            INFER,
            infer_request(values, model="slow_python", sleep=2.0),
            extra=[("grpc-timeout", "200m")],
        )
        elapsed = time.monotonic() - started
        record("grpc-timeout 200m", f"{reply.describe()} after {elapsed:.2f} s")
        assert reply.grpc_status == DEADLINE_EXCEEDED, reply.describe()
        assert elapsed < 1.5
        # the model answers again (once the expired call's sleep is over), and so does the rest
        assert_echoes(client.call(INFER, infer_request(values, model="slow_python")), values)
        serves(client)
    serves_new(server)


def test_client_reset_mid_request_leaves_the_connection_serving(server: ServerProcess) -> None:
    message = grpc_frame(infer_request(GOOD))
    with H2Client(server.grpc_address) as client:
        stream_id = client.start(INFER)
        client.send(stream_id, message[:20], end_stream=False)  # the headers, part of a message
        client.conn.reset_stream(stream_id, h2.errors.ErrorCodes.CANCEL)
        client.flush()
        serves(client)
        assert not client.closed, client.describe_close()
        assert not client.replies[stream_id].ok
    serves_new(server)


# -- 12, 13, 15: connection errors -------------------------------------------------------------


@pytest.mark.parametrize(
    "data",
    [b"garbage, not the HTTP/2 connection preface\r\n\r\n", b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"],
    ids=["garbage", "http1-get"],
)
def test_not_http2_is_closed(server: ServerProcess, data: bytes) -> None:
    """grpc.aio: sends its SETTINGS and a connection WINDOW_UPDATE (its server preface, before
    reading anything), then closes the socket; no GOAWAY, no HTTP/1.1 answer."""
    host, port = server.grpc_address.rsplit(":", 1)
    received = b""
    with socket.create_connection((host, int(port)), timeout=TIMEOUT_S) as sock:
        sock.sendall(data)
        deadline = time.monotonic() + TIMEOUT_S
        while time.monotonic() < deadline:
            try:
                chunk = sock.recv(65536)
            except ConnectionResetError:
                chunk = b""
            if not chunk:
                break
            received += chunk
        else:
            pytest.fail(f"the connection is still open; the server sent {received!r}")
    http1 = received.find(b"HTTP/1.")  # an HTTP/1.1 answer, after any HTTP/2 frames
    frames = frame_names(received if http1 < 0 else received[:http1])
    answer = "" if http1 < 0 else f", then {received[http1 : http1 + 200]!r}"
    record(f"not HTTP/2 {data[:20]!r}", f"closed after {frames}{answer}")
    assert b"HTTP/1.1 2" not in received, received
    serves_new(server)


def test_data_on_a_never_opened_stream(server: ServerProcess) -> None:
    """RFC 9113 5.1: a connection error; the GOAWAY says PROTOCOL_ERROR and why."""
    with H2Client(server.grpc_address) as client:
        serves(client)  # stream 1
        client.send_raw(raw_frame(DATA, 0x1, 101, b"hello"))
        with pytest.raises(ConnectionGone):
            client.call(INFER, infer_request(GOOD))  # stream 3
        record("DATA on an idle stream", client.describe_close())
        assert client.goaway is not None, client.describe_close()
        assert client.goaway.error_code == h2.errors.ErrorCodes.PROTOCOL_ERROR
        assert b"idle stream 101" in client.goaway.additional_data
    serves_new(server)


def test_frame_above_max_frame_size_ends_the_connection(server: ServerProcess) -> None:
    """A DATA frame one byte over SETTINGS_MAX_FRAME_SIZE (only its start is sent: the length
    is in the frame header). RFC 9113: FRAME_SIZE_ERROR, a connection error. grpc.aio (max
    frame size 4194304): no GOAWAY; the open stream gets Trailers-Only grpc-status 14
    'Failed parsing HTTP/2 (Frame size 4194305 is larger than max frame size 4194304)' and
    RST_STREAM NO_ERROR, then the socket is closed."""
    with H2Client(server.grpc_address) as client:
        limit = client.conn.max_outbound_frame_size
        stream_id = client.start(INFER)
        client.send_raw(raw_frame(DATA, 0, stream_id, bytes(limit + 1))[: 9 + 1024])
        client.wait_closed()
        reply = client.replies[stream_id]
        record(
            f"frame of {limit + 1} bytes",
            f"{client.describe_close()}; the stream: {reply.describe()}",
        )
        assert client.goaway is not None, client.describe_close()
        assert client.goaway.error_code == h2.errors.ErrorCodes.FRAME_SIZE_ERROR
        assert not reply.ok, reply.describe()
    serves_new(server)


# -- 14: header blocks -------------------------------------------------------------------------


def test_header_block_split_over_continuation_frames(server: ServerProcess) -> None:
    """The block, with 2 KB of custom metadata (grpc.aio refuses more than 8 KiB of metadata
    with RESOURCE_EXHAUSTED, and its 4 MiB frames mean h2 itself never splits), cut by hand
    into a HEADERS frame and CONTINUATION frames of 256 bytes each."""
    with H2Client(server.grpc_address) as client:
        stream_id = client.open_stream()
        client.conn.send_headers(stream_id, client.request_headers(INFER, [("x-meta", "m" * 2000)]))
        sent = recut_headers(client.conn.data_to_send(), piece=256)
        kinds = [frame[0] for frame in split_frames(sent)]
        assert kinds[0] == HEADERS
        assert kinds[1:] == [CONTINUATION] * (len(kinds) - 1)
        assert len(kinds) >= 5
        client.send_raw(sent)
        client.send(stream_id, grpc_frame(infer_request(GOOD)))
        assert_echoes(client.wait(stream_id), GOOD)
        serves(client)  # HPACK state still agrees on both sides


def test_huge_header_list_is_refused(server: ServerProcess) -> None:
    """1 MiB of metadata (64 headers of 16 KiB, HPACK literals), in HEADERS and CONTINUATION
    frames of 16 KiB. grpc.aio (which advertises SETTINGS_MAX_HEADER_LIST_SIZE 16384): HTTP
    200, Trailers-Only grpc-status 8, 'received metadata size exceeds hard limit (...)', and the
    connection goes on serving."""
    extra = b"".join(literal_never_indexed(f"x-big-{i}".encode(), b"v" * 16384) for i in range(64))
    with H2Client(server.grpc_address) as client:
        stream_id = client.open_stream()
        client.conn.send_headers(stream_id, client.request_headers(INFER))
        piece = min(16384, client.conn.max_outbound_frame_size)
        client.send_raw(recut_headers(client.conn.data_to_send(), piece=piece, extra_block=extra))
        client.send(stream_id, grpc_frame(infer_request(GOOD)))
        reply = client.replies[stream_id]
        try:
            client.wait(stream_id, timeout=30)
        except ConnectionGone:
            record("1 MiB of metadata", f"{client.describe_close()}; {reply.describe()}")
            assert not reply.ok, reply.describe()
        else:
            record("1 MiB of metadata", f"{reply.describe()}; {client.describe_close()}")
            assert not reply.ok, reply.describe()
            if not client.closed:  # a stream error: the connection goes on
                serves(client)
    serves_new(server)


# -- 16, 17 ------------------------------------------------------------------------------------


def test_wrong_content_type(server: ServerProcess) -> None:
    """The spec: servers SHOULD answer HTTP 415; the status says what was wrong."""
    with H2Client(server.grpc_address) as client:
        headers = [
            (name, "application/json" if name == "content-type" else value)
            for name, value in client.request_headers(INFER)
        ]
        stream_id = client.start(INFER, headers=headers)
        client.send(stream_id, grpc_frame(infer_request(GOOD)))
        reply = client.wait(stream_id)
        record("content-type application/json", f"{reply.describe()}, headers {reply.headers}")
        assert reply.http_status == 415, reply.describe()
        assert reply.grpc_status not in (None, OK), reply.describe()
        assert "application/json" in reply.grpc_message
        serves(client)
    serves_new(server)


def test_health_check_is_serving(server: ServerProcess) -> None:
    request = health_pb2.HealthCheckRequest(service="").SerializeToString()
    with H2Client(server.grpc_address) as client:
        reply = client.call(HEALTH, request)
    assert reply.ok, reply.describe()
    [message] = reply.messages
    status = health_pb2.HealthCheckResponse.FromString(message).status
    assert status == health_pb2.HealthCheckResponse.SERVING == 1
