"""RFC 9113 section 3.4, the connection preface, on a real server (#24 item 12): the server's
preface (a SETTINGS frame) answers the client's instead of going out at connect (3.4 allows it:
"The server connection preface MAY be sent after receiving the client connection preface"), so
an HTTP/1.1 client on the gRPC port reads a plain-text 400 from the very first byte, as HTTP/1.1,
not an HTTP/2 frame it would take for HTTP/0.9. gRPC clients send their preface first and are
served as before.
"""

from __future__ import annotations

import socket
import struct
from collections.abc import Iterator

import grpc
import httpx
import pytest

from rosettaserve.protocols.health.pb import health_pb2
from tests.rfc.h2_support import (
    ACK,
    GOAWAY,
    PREFACE,
    PROTOCOL_ERROR,
    SETTINGS,
    TIMEOUT_S,
    RawH2,
    h2_server,
    serves_new,
)
from tests.serverproc import ServerProcess


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    yield from h2_server(tmp_path_factory, "rfc9113_preface")


def everything_until_closed(server: ServerProcess, data: bytes) -> bytes:
    """Send ``data`` and read until the server closes the connection (bounded in time)."""
    host, port = server.grpc_address.rsplit(":", 1)
    received = b""
    with socket.create_connection((host, int(port)), timeout=TIMEOUT_S) as sock:
        sock.sendall(data)
        while True:
            try:
                chunk = sock.recv(65536)
            except ConnectionResetError:
                break
            if not chunk:
                break
            received += chunk
    return received


@pytest.mark.parametrize(
    "request_bytes",
    [
        b"GET /v2/health/ready HTTP/1.1\r\nHost: localhost\r\n\r\n",
        b"POST /v2/models/x/infer HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n",
        b"GET / HTTP/1.0\r\n\r\n",  # shorter than the HTTP/2 preface
        b"GET / HTTP/1.1\r\nHost: x\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQAAP__\r\n\r\n",
    ],
    ids=["get", "post", "short-http10", "h2c-upgrade"],
)
def test_http11_request_gets_a_plain_400_before_any_http2_byte(
    server: ServerProcess, request_bytes: bytes
) -> None:
    """3.4: the server's preface waits for the client's; what is not HTTP/2 and looks like an
    HTTP/1.1 request is answered in HTTP/1.1 (no h2c upgrade: 3.1 leaves it to the server)."""
    received = everything_until_closed(server, request_bytes)
    assert received.startswith(b"HTTP/1.1 400 Bad Request\r\n"), received[:80]
    head, _, body = received.partition(b"\r\n\r\n")
    assert b"content-length: %d" % len(body) in head.lower()
    assert b"grpc" in body.lower()
    serves_new(server)


def test_an_http11_client_library_reads_the_400(server: ServerProcess) -> None:
    """What curl or any HTTP/1.1 client sees: a well-formed 400 saying what the port speaks."""
    reply = httpx.get(f"http://{server.grpc_address}/v2/health/ready", timeout=TIMEOUT_S)
    assert reply.status_code == 400
    assert "HTTP/2" in reply.text


def test_the_server_preface_is_a_settings_frame_first(server: ServerProcess) -> None:
    """3.4: "The server connection preface consists of a potentially empty SETTINGS frame that
    MUST be the first frame the server sends in the HTTP/2 connection"."""
    with RawH2(server.grpc_address) as c:
        first = c.frames[0]
        assert (first.kind, first.flags, first.stream_id) == (SETTINGS, 0, 0), c.seen()
        c.serves()


def test_the_preface_may_arrive_in_pieces(server: ServerProcess) -> None:
    """3.4: the preface is a sequence of octets; the server reads it however TCP cuts it."""
    with RawH2(server.grpc_address, handshake=False) as c:
        for i in range(len(PREFACE)):
            c.send(PREFACE[i : i + 1])
        c.frame(SETTINGS, 0, 0)
        c.wait(lambda f: f.kind == SETTINGS and not f.flags & ACK)
        c.serves()


@pytest.mark.parametrize(
    "data",
    [b"PRI * HTTP/2.0\r\n\r\nXX\r\n\r\n", b"\x00" * 24, b"PRI * HTTP/1.1\r\n\r\nSM\r\n\r\n"],
    ids=["wrong-tail", "zeros", "wrong-version"],
)
def test_an_invalid_preface_is_a_connection_error(server: ServerProcess, data: bytes) -> None:
    """3.4: "Clients and servers MUST treat an invalid connection preface as a connection error
    of type PROTOCOL_ERROR": the server's SETTINGS (its preface must come first), a GOAWAY
    with PROTOCOL_ERROR, and the close."""
    received = everything_until_closed(server, data)
    frames = []
    while len(received) >= 9:
        length = int.from_bytes(received[:3], "big")
        frames.append((received[3], received[9 : 9 + length]))
        received = received[9 + length :]
    assert frames, "nothing received"
    assert frames[0][0] == SETTINGS, frames
    goaway = [payload for kind, payload in frames if kind == GOAWAY]
    assert goaway, frames
    assert struct.unpack(">L", goaway[0][4:8])[0] == PROTOCOL_ERROR
    serves_new(server)


def test_grpcio_clients_are_served(server: ServerProcess) -> None:
    """A gRPC client sends its preface first: grpcio's calls succeed as before."""
    with grpc.insecure_channel(server.grpc_address) as channel:
        check = channel.unary_unary(
            "/grpc.health.v1.Health/Check",
            request_serializer=health_pb2.HealthCheckRequest.SerializeToString,
            response_deserializer=health_pb2.HealthCheckResponse.FromString,
        )
        for _ in range(3):
            reply = check(health_pb2.HealthCheckRequest(service=""), timeout=TIMEOUT_S)
            assert reply.status == health_pb2.HealthCheckResponse.SERVING
