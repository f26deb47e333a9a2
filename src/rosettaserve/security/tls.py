"""TLS with the standard library's ``ssl``: the contexts of the listening ports, their reload on
SIGHUP, and the context an instance or the scheduler uses to reach its peers.

TLS 1.2 at least; certificate and key in PEM (an encrypted key is refused: nothing could type
its pass phrase); ``client_ca``: clients must present a certificate that CA signed (mutual TLS).
A file that cannot be used stops the start with a message naming it.

Reloading: a listening socket keeps the context it was created with, so that context only
picks, for each new connection (OpenSSL's server-name callback, which runs for every client
hello, with or without SNI), the context loaded last. A reload that fails keeps the previous
certificate and logs why; connections already open keep theirs.
"""

from __future__ import annotations

import logging
import ssl
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger("rosettaserve.tls")

ALPN_HTTP = ("http/1.1",)
ALPN_GRPC = ("h2",)


class TlsError(ValueError):
    """A certificate, key or CA file that cannot be used; the message names the file."""


@dataclass(frozen=True)
class TlsFiles:
    cert: Path
    key: Path
    client_ca: Path | None = None  # set: mutual TLS


def _no_pass_phrase() -> str:
    raise TlsError("is encrypted (a pass phrase cannot be typed at start; decrypt the key)")


def _read(path: Path, what: str, marker: bytes) -> None:
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise TlsError(f"cannot read the {what} {path}: {exc.strerror or exc}") from None
    if marker not in data:
        raise TlsError(f"the {what} {path} holds no PEM {what}")


def _load_chain(context: ssl.SSLContext, cert: Path, key: Path) -> None:
    _read(cert, "certificate", b"-----BEGIN CERTIFICATE-----")
    _read(key, "private key", b"PRIVATE KEY-----")
    try:
        context.load_cert_chain(cert, key, password=_no_pass_phrase)
    except TlsError as exc:
        raise TlsError(f"the private key {key} {exc}") from None
    except ssl.SSLError as exc:
        raise TlsError(
            f"the private key {key} does not match the certificate {cert}, or one of them is "
            f"malformed ({exc.reason or exc})"
        ) from None


def _load_ca(context: ssl.SSLContext, ca: Path, what: str) -> None:
    _read(ca, what, b"-----BEGIN CERTIFICATE-----")
    try:
        context.load_verify_locations(cafile=ca)
    except ssl.SSLError as exc:
        raise TlsError(f"cannot use the {what} {ca} ({exc.reason or exc})") from None


def server_context(files: TlsFiles, alpn: tuple[str, ...]) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.options |= ssl.OP_NO_COMPRESSION | ssl.OP_NO_RENEGOTIATION
    context.set_alpn_protocols(list(alpn))
    _load_chain(context, files.cert, files.key)
    if files.client_ca is not None:
        _load_ca(context, files.client_ca, "client CA certificate")
        context.verify_mode = ssl.CERT_REQUIRED
    return context


class Reloadable:
    """One port's listening context, handing each new connection the context loaded last."""

    def __init__(self, files: TlsFiles, alpn: tuple[str, ...]) -> None:
        self.alpn = alpn
        self.context = server_context(files, alpn)  # what the listening socket holds
        self.current = self.context
        self.context.sni_callback = self._pick

    def _pick(self, conn: ssl.SSLObject, name: str | None, context: ssl.SSLContext) -> None:
        current = self.current
        if current is not context:
            conn.context = current


class ServerTls:
    """The contexts of the HTTP port (and the metrics port) and of the gRPC port."""

    def __init__(self, files: TlsFiles) -> None:
        self.files = files
        self.http = Reloadable(files, ALPN_HTTP)
        self.grpc = Reloadable(files, ALPN_GRPC)

    def reload(self) -> bool:
        """Load the files again (SIGHUP); on failure keep what is in use and log why."""
        try:
            fresh = [(r, server_context(self.files, r.alpn)) for r in (self.http, self.grpc)]
        except TlsError as exc:
            log.error("TLS reload failed, the certificate in use stays: %s", exc)
            return False
        for reloadable, context in fresh:
            reloadable.current = context
        log.info("TLS certificate reloaded from %s", self.files.cert)
        return True


def client_context(
    ca: Path | None, cert: Path | None = None, key: Path | None = None
) -> ssl.SSLContext:
    """What reaches a peer over HTTPS: its certificate verified against ``ca`` (the system's
    CAs when None), with ``cert``/``key`` presented to peers that require mutual TLS."""
    context = ssl.create_default_context()
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    if ca is not None:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        _load_ca(context, ca, "peer CA certificate")
    if cert is not None or key is not None:
        if cert is None or key is None:
            raise TlsError("--peer-cert and --peer-key go together")
        _load_chain(context, cert, key)
    context.set_alpn_protocols(list(ALPN_HTTP))
    return context
