"""A certificate, key, CA or API key file that cannot be used stops the start, with a message
naming the file (and never a key)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.tls_support import Pki, issue, make_pki, write

TIMEOUT_S = 60.0


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


def refused(tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> str:
    """The start's output; it must have failed."""
    cmd = [sys.executable, "-m", "rosettaserve", "serve", str(tmp_path), "--http-port", "0"]
    done = subprocess.run(
        [*cmd, "--grpc-port", "0", *args],
        capture_output=True, text=True, timeout=TIMEOUT_S, check=False, env=env,
    )  # fmt: skip
    assert done.returncode != 0, done.stdout + done.stderr
    assert "http:" not in done.stdout
    return done.stderr


def test_a_missing_certificate_is_named(pki: Pki, tmp_path: Path) -> None:
    missing = tmp_path / "nowhere.pem"
    err = refused(tmp_path, "--tls-cert", str(missing), "--tls-key", str(pki.server_key))
    assert f"cannot read the certificate {missing}" in err


def test_an_unreadable_key_is_named(pki: Pki, tmp_path: Path) -> None:
    folder = tmp_path / "a_folder.key"  # a folder: unreadable as a file, even for root
    folder.mkdir()
    err = refused(tmp_path, "--tls-cert", str(pki.server_pem), "--tls-key", str(folder))
    assert f"cannot read the private key {folder}" in err


def test_a_key_that_is_not_pem_is_named(pki: Pki, tmp_path: Path) -> None:
    garbage = tmp_path / "garbage.key"
    garbage.write_text("hello\n")
    err = refused(tmp_path, "--tls-cert", str(pki.server_pem), "--tls-key", str(garbage))
    assert f"the private key {garbage} holds no PEM private key" in err


def test_a_key_of_another_certificate_is_named_with_the_certificate(
    pki: Pki, tmp_path: Path
) -> None:
    other_pem, other_key = tmp_path / "other.pem", tmp_path / "other.key"
    write(issue("other", pki.ca), other_pem, other_key)
    err = refused(tmp_path, "--tls-cert", str(pki.server_pem), "--tls-key", str(other_key))
    assert f"the private key {other_key} does not match the certificate {pki.server_pem}" in err


def test_a_bad_client_ca_is_named(pki: Pki, tmp_path: Path) -> None:
    bad = tmp_path / "ca.pem"
    bad.write_text("-----BEGIN CERTIFICATE-----\nnot base64 at all\n-----END CERTIFICATE-----\n")
    err = refused(tmp_path, *pki.server_args(), "--tls-client-ca", str(bad))
    assert f"cannot use the client CA certificate {bad}" in err


def test_cert_without_key_is_refused(pki: Pki, tmp_path: Path) -> None:
    err = refused(tmp_path, "--tls-cert", str(pki.server_pem))
    assert "--tls-cert and --tls-key go together" in err


def test_a_missing_api_key_file_is_named(tmp_path: Path) -> None:
    missing = tmp_path / "keys.txt"
    err = refused(tmp_path, "--api-key-file", str(missing))
    assert f"cannot read the API key file {missing}" in err


def test_an_api_key_file_without_a_key_is_named(tmp_path: Path) -> None:
    empty = tmp_path / "keys.txt"
    empty.write_text("# nothing yet\n\n")
    err = refused(tmp_path, "--api-key-file", str(empty))
    assert f"the API key file {empty} holds no key" in err


def test_a_bad_key_line_names_the_file_and_line_not_the_key(tmp_path: Path) -> None:
    keys = tmp_path / "keys.txt"
    keys.write_text("good-key\nhas a space-secret\n")
    err = refused(tmp_path, "--api-key-file", str(keys))
    assert f"{keys} line 2" in err
    assert "secret" not in err
