"""Certificates made by the tests (the ``cryptography`` package) and TLS servers started with
them: a CA, a server certificate for 127.0.0.1 and localhost, a client certificate of the same
CA (mutual TLS), and a second CA with a client certificate of its own (a stranger)."""

from __future__ import annotations

import datetime
import ipaddress
import ssl
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from tests.serverproc import ServerProcess, start_server

Pair = tuple[x509.Certificate, ec.EllipticCurvePrivateKey]


def issue(common_name: str, issuer: Pair | None = None, *, ca: bool = False) -> Pair:
    """A certificate valid for a day around now; signed by ``issuer`` (self-signed: None)."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(issuer[0].subject if issuer else name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if ca:
        usage = x509.KeyUsage(False, False, False, False, False, True, True, False, False)
        builder = builder.add_extension(usage, critical=True)
    else:
        names = [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
        purposes = [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
        builder = builder.add_extension(x509.ExtendedKeyUsage(purposes), critical=False)
    signer = issuer[1] if issuer else key
    return builder.sign(signer, hashes.SHA256()), key


def write(pair: Pair, cert_path: Path, key_path: Path) -> None:
    cert, key = pair
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )


@dataclass
class Pki:
    folder: Path
    ca: Pair

    @property
    def ca_pem(self) -> Path:
        return self.folder / "ca.pem"

    @property
    def server_pem(self) -> Path:
        return self.folder / "server.pem"

    @property
    def server_key(self) -> Path:
        return self.folder / "server.key"

    @property
    def client_pem(self) -> Path:
        return self.folder / "client.pem"

    @property
    def client_key(self) -> Path:
        return self.folder / "client.key"

    @property
    def stranger_pem(self) -> Path:  # a client certificate of another CA
        return self.folder / "stranger.pem"

    @property
    def stranger_key(self) -> Path:
        return self.folder / "stranger.key"

    def server_args(self, *, mutual: bool = False) -> list[str]:
        args = ["--tls-cert", str(self.server_pem), "--tls-key", str(self.server_key)]
        return [*args, "--tls-client-ca", str(self.ca_pem)] if mutual else args

    def reissue_server(self, common_name: str) -> None:
        """A new server certificate (same CA) in place of the old one: what a rotation does."""
        write(issue(common_name, self.ca), self.server_pem, self.server_key)

    def context(self, *, cert: bool = False, stranger: bool = False) -> ssl.SSLContext:
        """A client context trusting our CA; with our client certificate, or a stranger's."""
        context = ssl.create_default_context(cafile=str(self.ca_pem))
        if cert:
            context.load_cert_chain(self.client_pem, self.client_key)
        if stranger:
            context.load_cert_chain(self.stranger_pem, self.stranger_key)
        return context


def make_pki(folder: Path) -> Pki:
    folder.mkdir(parents=True, exist_ok=True)
    ca = issue("rosettaserve test CA", ca=True)
    pki = Pki(folder, ca)
    pki.ca_pem.write_bytes(ca[0].public_bytes(serialization.Encoding.PEM))
    write(issue("server", ca), pki.server_pem, pki.server_key)
    write(issue("client", ca), pki.client_pem, pki.client_key)
    other = issue("another CA", ca=True)
    write(issue("stranger", other), pki.stranger_pem, pki.stranger_key)
    return pki


def start_tls_server(repo: Path, pki: Pki, *args: str, mutual: bool = False) -> ServerProcess:
    context = pki.context(cert=mutual)
    return start_server(repo, *pki.server_args(mutual=mutual), *args, context=context)


def peer_subject(host: str, port: int, pki: Pki) -> str:
    """The common name of the certificate the server presents to a new connection."""
    import socket

    with (
        socket.create_connection((host, port), timeout=10) as raw,
        pki.context().wrap_socket(raw, server_hostname=host) as tls,
    ):
        cert = tls.getpeercert()
    assert cert is not None
    return str(dict(item[0] for item in cert["subject"])["commonName"])
