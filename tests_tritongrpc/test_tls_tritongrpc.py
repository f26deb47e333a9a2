"""tritonclient.grpc over TLS (``ssl=True``, ``root_certificates``), with mutual TLS and an API
key: the client's own certificate and the key in its headers. Runs in its own pytest process
(``pytest tests_tritongrpc``): see conftest.py."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from tests.conftest import EXAMPLES
from tests.integration.tls_support import Pki, make_pki, start_tls_server
from tests.serverproc import ServerProcess, served

KEY = "triton-grpc-key-9f"


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def tls_server(tmp_path_factory: pytest.TempPathFactory, pki: Pki) -> Iterator[ServerProcess]:
    repo = tmp_path_factory.mktemp("tls_repo")
    shutil.copytree(EXAMPLES / "half_plus_two", repo / "half_plus_two")
    yield from served(start_tls_server(repo, pki, "--api-key", KEY, mutual=True))


def client(server: ServerProcess, pki: Pki, *, certificate: bool = True) -> Any:
    return grpcclient.InferenceServerClient(
        server.grpc_address.removesuffix(" (tls)"),
        ssl=True,
        root_certificates=str(pki.ca_pem),
        private_key=str(pki.client_key) if certificate else None,
        certificate_chain=str(pki.client_pem) if certificate else None,
    )


def test_infer_over_mutual_tls_with_the_key(tls_server: ServerProcess, pki: Pki) -> None:
    with client(tls_server, pki) as triton:
        assert triton.is_server_live()  # a probe: no key needed
        x = grpcclient.InferInput("x", [2], "FP32")
        x.set_data_from_numpy(np.array([2.0, 6.0], dtype=np.float32))
        result = triton.infer("half_plus_two", [x], headers={"authorization": f"Bearer {KEY}"})
        assert result.as_numpy("y").tolist() == [3.0, 5.0]


def test_no_key_is_unauthenticated(tls_server: ServerProcess, pki: Pki) -> None:
    with client(tls_server, pki) as triton:
        with pytest.raises(InferenceServerException) as caught:
            triton.get_model_metadata("half_plus_two")
        assert caught.value.status() == "StatusCode.UNAUTHENTICATED"
        wrong = {"x-api-key": "not-the-key"}
        with pytest.raises(InferenceServerException) as caught:
            triton.get_model_metadata("half_plus_two", headers=wrong)
        assert caught.value.status() == "StatusCode.UNAUTHENTICATED"


def test_without_a_client_certificate_the_handshake_fails(
    tls_server: ServerProcess, pki: Pki
) -> None:
    with client(tls_server, pki, certificate=False) as triton:
        with pytest.raises(InferenceServerException) as caught:
            triton.is_server_live(client_timeout=10)
        assert caught.value.status() in ("StatusCode.UNAVAILABLE", "StatusCode.DEADLINE_EXCEEDED")
