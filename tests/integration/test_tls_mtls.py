"""Mutual TLS (--tls-client-ca) on both ports: a client certificate of that CA gets in; none,
or another CA's, fails the handshake; the server goes on serving."""

from __future__ import annotations

import shutil
from collections.abc import Iterator

import gevent.ssl
import grpc
import httpx
import pytest
import tritonclient.http as triton_http

from rosettaserve.protocols.oip.pb import grpc_service_pb2 as oip_pb
from tests.conftest import EXAMPLES
from tests.integration.tls_support import Pki, make_pki, start_tls_server
from tests.serverproc import ServerProcess, served

TIMEOUT_S = 30.0
LIVE = "/inference.GRPCInferenceService/ServerLive"


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, pki: Pki) -> Iterator[ServerProcess]:
    repo = tmp_path_factory.mktemp("mtls_repo")
    shutil.copytree(EXAMPLES / "half_plus_two", repo / "half_plus_two")
    yield from served(start_tls_server(repo, pki, mutual=True))


def live_over_grpc(server: ServerProcess, pki: Pki, chain: tuple[bytes, bytes] | None) -> bool:
    key, cert = chain if chain is not None else (None, None)
    credentials = grpc.ssl_channel_credentials(
        pki.ca_pem.read_bytes(), private_key=key, certificate_chain=cert
    )
    target = server.grpc_address.removesuffix(" (tls)")
    with grpc.secure_channel(target, credentials) as channel:
        live = channel.unary_unary(
            LIVE,
            request_serializer=lambda m: m.SerializeToString(),
            response_deserializer=oip_pb.ServerLiveResponse.FromString,
        )
        return bool(live(oip_pb.ServerLiveRequest(), timeout=10).live)


def test_our_client_certificate_gets_in_on_both_ports(server: ServerProcess, pki: Pki) -> None:
    with httpx.Client(verify=pki.context(cert=True), timeout=TIMEOUT_S) as client:
        assert client.get(server.http_url + "/v2/models/half_plus_two").status_code == 200
    chain = (pki.client_key.read_bytes(), pki.client_pem.read_bytes())
    assert live_over_grpc(server, pki, chain)


def test_tritonclient_http_with_a_client_certificate(server: ServerProcess, pki: Pki) -> None:
    options = {"ca_certs": str(pki.ca_pem), "certfile": str(pki.client_pem),
               "keyfile": str(pki.client_key)}  # fmt: skip
    client = triton_http.InferenceServerClient(
        server.http_hostport, ssl=True, ssl_options=options,
        ssl_context_factory=gevent.ssl.create_default_context,
    )  # fmt: skip
    try:
        assert client.is_model_ready("half_plus_two")
    finally:
        client.close()


@pytest.mark.parametrize("stranger", [False, True], ids=["no certificate", "another CA's"])
def test_a_client_without_our_certificate_fails_the_handshake(
    server: ServerProcess, pki: Pki, stranger: bool
) -> None:
    with (
        httpx.Client(verify=pki.context(stranger=stranger), timeout=TIMEOUT_S) as client,
        pytest.raises(httpx.TransportError),
    ):
        client.get(server.http_url + "/v2/health/live")
    chain = (pki.stranger_key.read_bytes(), pki.stranger_pem.read_bytes()) if stranger else None
    with pytest.raises(grpc.RpcError) as caught:
        live_over_grpc(server, pki, chain)
    assert caught.value.code() == grpc.StatusCode.UNAVAILABLE
    with httpx.Client(verify=pki.context(cert=True), timeout=TIMEOUT_S) as client:
        assert client.get(server.http_url + "/v2/health/live").status_code == 200
