"""security.tls: contexts, the files they name when they cannot be used, and reloads."""

from __future__ import annotations

import ssl
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization

from rosettaserve.security.tls import (
    ServerTls,
    TlsError,
    TlsFiles,
    client_context,
    server_context,
)
from tests.integration.tls_support import Pki, issue, make_pki


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


def test_a_server_context_is_tls_1_2_at_least_with_alpn(pki: Pki) -> None:
    context = server_context(TlsFiles(pki.server_pem, pki.server_key), ("h2",))
    assert context.minimum_version == ssl.TLSVersion.TLSv1_2
    assert context.verify_mode == ssl.CERT_NONE
    mutual = server_context(TlsFiles(pki.server_pem, pki.server_key, pki.ca_pem), ("h2",))
    assert mutual.verify_mode == ssl.CERT_REQUIRED


def test_an_encrypted_key_is_refused_naming_it(pki: Pki, tmp_path: Path) -> None:
    cert, key = issue("encrypted", pki.ca)
    cert_path, key_path = tmp_path / "c.pem", tmp_path / "c.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.BestAvailableEncryption(b"pass phrase"),
        )
    )
    with pytest.raises(TlsError, match=f"the private key {key_path} is encrypted"):
        server_context(TlsFiles(cert_path, key_path), ("h2",))


def test_a_reload_that_fails_keeps_the_context_in_use(pki: Pki, tmp_path: Path) -> None:
    cert, key = tmp_path / "s.pem", tmp_path / "s.key"
    cert.write_bytes(pki.server_pem.read_bytes())
    key.write_bytes(pki.server_key.read_bytes())
    tls = ServerTls(TlsFiles(cert, key))
    before = tls.http.current
    key.write_text("gone\n")
    assert not tls.reload()
    assert tls.http.current is before
    key.write_bytes(pki.server_key.read_bytes())
    assert tls.reload()
    assert tls.http.current is not before
    assert tls.http.context is before  # the listening socket's context never changes


def test_a_client_context_verifies_and_may_present_a_certificate(pki: Pki) -> None:
    context = client_context(pki.ca_pem, pki.client_pem, pki.client_key)
    assert context.verify_mode == ssl.CERT_REQUIRED
    assert context.check_hostname
    with pytest.raises(TlsError, match="go together"):
        client_context(pki.ca_pem, pki.client_pem, None)
