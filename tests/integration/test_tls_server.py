"""TLS on every port of one server (no API key): real clients over HTTPS and gRPC over TLS,
clear text refused while the server goes on serving, the metrics port, and a certificate
reloaded on SIGHUP (a bad one keeps the old)."""

from __future__ import annotations

import shutil
import signal
import socket
import ssl
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import gevent.ssl
import grpc
import httpx
import numpy as np
import pytest
import tritonclient.http as triton_http

from rosettaserve.protocols.grps.pb import grps_pb2
from rosettaserve.protocols.oip.pb import grpc_service_pb2 as oip_pb
from tests.conftest import EXAMPLES
from tests.integration.grps_support import generate_stubs
from tests.integration.tls_support import Pki, make_pki, peer_subject, start_tls_server
from tests.pdproc import eventually
from tests.serverproc import ServerProcess, served

TIMEOUT_S = 30.0


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, pki: Pki) -> Iterator[ServerProcess]:
    repo = tmp_path_factory.mktemp("tls_repo")
    for model in ("half_plus_two", "greeter_python"):
        shutil.copytree(EXAMPLES / model, repo / model)
    args = ("--metrics-port", "0", "--grps-default-model", "greeter_python")
    yield from served(start_tls_server(repo, pki, *args))


def grpc_target(server: ServerProcess) -> str:
    return server.grpc_address.removesuffix(" (tls)")


def port_of(address: str) -> int:
    return int(address.rsplit(":", 1)[1].split("/", maxsplit=1)[0])


def secure_channel(server: ServerProcess, pki: Pki) -> grpc.Channel:
    credentials = grpc.ssl_channel_credentials(pki.ca_pem.read_bytes())
    return grpc.secure_channel(grpc_target(server), credentials)


def unary(channel: grpc.Channel, method: str, reply: Any) -> Any:
    return channel.unary_unary(
        method, request_serializer=lambda m: m.SerializeToString(), response_deserializer=reply
    )


def test_the_start_up_lines_say_https_and_tls(server: ServerProcess) -> None:
    assert server.http_url.startswith("https://127.0.0.1:")
    assert server.grpc_address.endswith(" (tls)")
    metrics = [line for line in server.lines if line.startswith("metrics: ")]
    assert metrics
    assert metrics[0].startswith("metrics: https://127.0.0.1:")


def test_tritonclient_http_over_tls(server: ServerProcess, pki: Pki) -> None:
    client = triton_http.InferenceServerClient(
        server.http_hostport,
        ssl=True,
        ssl_options={"ca_certs": str(pki.ca_pem)},
        ssl_context_factory=gevent.ssl.create_default_context,
    )
    try:
        assert client.is_server_ready()
        x = triton_http.InferInput("x", [3], "FP32")
        x.set_data_from_numpy(np.array([1.0, 2.0, 5.0], dtype=np.float32))
        result = client.infer("half_plus_two", [x])
        assert result.as_numpy("y").tolist() == [2.5, 3.0, 4.5]
    finally:
        client.close()


def test_large_bodies_over_tls_both_ports(server: ServerProcess, pki: Pki) -> None:
    """1 MiB each way: the HTTP server reads a large body straight into a buffer of its own,
    which the TLS transport fills as the clear-text one does."""
    values = np.arange(262_144, dtype=np.float32)
    client = triton_http.InferenceServerClient(
        server.http_hostport, ssl=True, ssl_options={"ca_certs": str(pki.ca_pem)},
        ssl_context_factory=gevent.ssl.create_default_context,
    )  # fmt: skip
    try:
        x = triton_http.InferInput("x", [values.size], "FP32")
        x.set_data_from_numpy(values, binary_data=True)
        result = client.infer("half_plus_two", [x])
        assert np.array_equal(result.as_numpy("y"), values * 0.5 + 2)
    finally:
        client.close()
    request = oip_pb.ModelInferRequest(model_name="half_plus_two")
    request.inputs.add(name="x", datatype="FP32", shape=[values.size])
    request.raw_input_contents.append(values.tobytes())
    with secure_channel(server, pki) as channel:
        infer = unary(channel, "/inference.GRPCInferenceService/ModelInfer",
                      oip_pb.ModelInferResponse.FromString)  # fmt: skip
        reply = infer(request, timeout=TIMEOUT_S)
        out = np.frombuffer(reply.raw_output_contents[0], np.float32)
        assert np.array_equal(out, values * 0.5 + 2)


def test_grpcio_secure_channel_oip_and_grps(
    server: ServerProcess, pki: Pki, tmp_path: Path
) -> None:
    stubs = generate_stubs(tmp_path)
    with secure_channel(server, pki) as channel:
        live = unary(channel, "/inference.GRPCInferenceService/ServerLive",
                     oip_pb.ServerLiveResponse.FromString)  # fmt: skip
        assert live(oip_pb.ServerLiveRequest(), timeout=TIMEOUT_S).live
        request = oip_pb.ModelInferRequest(model_name="half_plus_two")
        tensor = request.inputs.add(name="x", datatype="FP32", shape=[2])
        tensor.contents.fp32_contents.extend([2.0, 4.0])
        infer = unary(channel, "/inference.GRPCInferenceService/ModelInfer",
                      oip_pb.ModelInferResponse.FromString)  # fmt: skip
        reply = infer(request, timeout=TIMEOUT_S)
        assert np.frombuffer(reply.raw_output_contents[0], np.float32).tolist() == [3.0, 4.0]
        grps = stubs.GrpsServiceStub(channel)
        answer = grps.Predict(grps_pb2.GrpsMessage(str_data="tls"), timeout=TIMEOUT_S)
        assert answer.status.status == grps_pb2.Status.SUCCESS
        assert "tls" in answer.str_data


def test_alpn_is_h2_on_the_grpc_port_and_http1_on_the_http_port(
    server: ServerProcess, pki: Pki
) -> None:
    for address, offered, chosen in (
        (grpc_target(server), ["h2"], "h2"),
        (server.http_hostport, ["h2", "http/1.1"], "http/1.1"),
    ):
        context = pki.context()
        context.set_alpn_protocols(offered)
        with (
            socket.create_connection(("127.0.0.1", port_of(address)), timeout=10) as raw,
            context.wrap_socket(raw, server_hostname="127.0.0.1") as tls,
        ):
            assert tls.selected_alpn_protocol() == chosen
            assert tls.version() in ("TLSv1.2", "TLSv1.3")


def test_curl_with_cacert(server: ServerProcess, pki: Pki) -> None:
    curl = shutil.which("curl")
    assert curl is not None, "curl is needed by this test"
    out = subprocess.run(
        [curl, "-sS", "--cacert", str(pki.ca_pem), server.http_url + "/v2/health/ready"],
        capture_output=True, text=True, timeout=TIMEOUT_S, check=True,
    )  # fmt: skip
    assert out.stdout == '{"ready":true}'
    refused = subprocess.run(  # the system's CAs do not know ours
        [curl, "-sS", server.http_url + "/v2/health/ready"],
        capture_output=True, text=True, timeout=TIMEOUT_S, check=False,
    )  # fmt: skip
    assert refused.returncode != 0


def test_clear_text_http_is_closed_and_the_server_goes_on(server: ServerProcess, pki: Pki) -> None:
    port = port_of(server.http_hostport)
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(b"GET /v2/health/live HTTP/1.1\r\nhost: x\r\n\r\n")
        answer = b""
        while chunk := sock.recv(4096):
            answer += chunk
    assert not answer.startswith(b"HTTP/1.1 2")
    with httpx.Client(verify=pki.context(), timeout=TIMEOUT_S) as client:
        assert client.get(server.http_url + "/v2/health/live").status_code == 200


def test_clear_text_grpc_fails_and_the_server_goes_on(server: ServerProcess, pki: Pki) -> None:
    with grpc.insecure_channel(grpc_target(server)) as channel:
        live = unary(channel, "/inference.GRPCInferenceService/ServerLive",
                     oip_pb.ServerLiveResponse.FromString)  # fmt: skip
        with pytest.raises(grpc.RpcError) as caught:
            live(oip_pb.ServerLiveRequest(), timeout=5)
        assert caught.value.code() in (
            grpc.StatusCode.UNAVAILABLE,
            grpc.StatusCode.DEADLINE_EXCEEDED,
        )
    with secure_channel(server, pki) as channel:
        live = unary(channel, "/inference.GRPCInferenceService/ServerLive",
                     oip_pb.ServerLiveResponse.FromString)  # fmt: skip
        assert live(oip_pb.ServerLiveRequest(), timeout=TIMEOUT_S).live


def test_tls_1_1_is_refused_by_the_server(server: ServerProcess, pki: Pki) -> None:
    context = pki.context()
    context.set_ciphers("DEFAULT:@SECLEVEL=0")
    context.minimum_version = ssl.TLSVersion.TLSv1
    context.maximum_version = ssl.TLSVersion.TLSv1_1
    with (
        socket.create_connection(("127.0.0.1", port_of(server.http_hostport)), timeout=10) as raw,
        pytest.raises(ssl.SSLError, match=r"(?i)protocol version|unsupported protocol|EOF"),
    ):
        context.wrap_socket(raw, server_hostname="127.0.0.1")  # the server hung up on the hello
    context.maximum_version = ssl.TLSVersion.TLSv1_2  # the same client allowed 1.2 gets in
    with (
        socket.create_connection(("127.0.0.1", port_of(server.http_hostport)), timeout=10) as raw,
        context.wrap_socket(raw, server_hostname="127.0.0.1") as tls,
    ):
        assert tls.version() == "TLSv1.2"


def test_the_metrics_port_speaks_tls(server: ServerProcess, pki: Pki) -> None:
    line = next(line for line in server.lines if line.startswith("metrics: "))
    url = line.removeprefix("metrics: ")
    with httpx.Client(verify=pki.context(), timeout=TIMEOUT_S) as client:
        response = client.get(url)
        assert response.status_code == 200
        assert "# TYPE" in response.text
        assert client.get(server.http_url + "/metrics").status_code == 404  # its own port


def test_sighup_reloads_the_certificate_and_a_bad_one_keeps_the_old(
    server: ServerProcess, pki: Pki
) -> None:
    """Last in this module: it replaces the server certificate."""
    http_port, grpc_port = port_of(server.http_hostport), port_of(grpc_target(server))
    assert peer_subject("127.0.0.1", http_port, pki) == "server"
    with httpx.Client(verify=pki.context(), timeout=TIMEOUT_S) as client:
        client.get(server.http_url + "/v2/health/live")  # a connection open across the reload
        pki.reissue_server("server-rotated")
        server.proc.send_signal(signal.SIGHUP)
        eventually(lambda: peer_subject("127.0.0.1", http_port, pki) == "server-rotated")
        assert peer_subject("127.0.0.1", grpc_port, pki) == "server-rotated"
        assert client.get(server.http_url + "/v2/health/live").status_code == 200
    pki.server_key.write_text("not a key\n")
    server.proc.send_signal(signal.SIGHUP)
    eventually(lambda: any("TLS reload failed" in line for line in server.lines))
    failure = next(line for line in server.lines if "TLS reload failed" in line)
    assert str(pki.server_key) in failure
    assert peer_subject("127.0.0.1", http_port, pki) == "server-rotated"
    with secure_channel(server, pki) as channel:
        live = unary(channel, "/inference.GRPCInferenceService/ServerLive",
                     oip_pb.ServerLiveResponse.FromString)  # fmt: skip
        assert live(oip_pb.ServerLiveRequest(), timeout=TIMEOUT_S).live
    pki.reissue_server("server")  # the fixture's server stops cleanly with a usable key again
