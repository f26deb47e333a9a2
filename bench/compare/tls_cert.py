"""The certificate every TLS case's server uses: one self-signed ECDSA P-256 certificate for
127.0.0.1 (made with the openssl command once per run, under bench/.venvs/tls/), so that every
server does the same handshake work; the load generators do not verify it, the answer checks
trust it as their CA."""

from __future__ import annotations

import subprocess
from functools import cache
from pathlib import Path

FOLDER = Path(__file__).resolve().parents[1] / ".venvs" / "tls"


@cache
def certificate() -> tuple[Path, Path]:
    """(certificate, key), PEM, made afresh once per process."""
    FOLDER.mkdir(parents=True, exist_ok=True)
    cert, key = FOLDER / "server.pem", FOLDER / "server.key"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
         "-nodes", "-keyout", str(key), "-out", str(cert), "-days", "2",
         "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    return cert, key
