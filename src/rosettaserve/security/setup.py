"""From the security settings to what the ports and the peers' client use, built at start."""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Callable

from rosettaserve.pd import http_client
from rosettaserve.security.keys import Guard
from rosettaserve.security.tls import ServerTls, client_context
from rosettaserve.settings import SecurityOptions


def check(options: SecurityOptions) -> None:
    """Load every file once before anything starts: TlsError names the one that cannot be used."""
    if options.tls is not None:
        ServerTls(options.tls)
    if options.peer_ca is not None or options.peer_cert is not None:
        client_context(options.peer_ca, options.peer_cert, options.peer_key)


def server_tls(options: SecurityOptions) -> ServerTls | None:
    return None if options.tls is None else ServerTls(options.tls)


def guard(options: SecurityOptions) -> Guard | None:
    return Guard(options.api_keys) if options.api_keys else None


def configure_peers(options: SecurityOptions) -> None:
    """What this process sends its peers (the PD scheduler and instances): HTTPS, the client
    certificate, the peer API key."""
    context = None
    if options.peer_ca is not None or options.peer_cert is not None:
        context = client_context(options.peer_ca, options.peer_cert, options.peer_key)
    http_client.configure(context, options.peers_secure, options.peer_api_key)


def reload_on_hangup(tls: ServerTls | None, also: Callable[[], None] | None = None) -> None:
    """SIGHUP loads the certificate, key and client CA again (``also``: passed it on, to the
    workers). Without TLS, SIGHUP keeps its usual meaning."""
    if tls is None:
        return

    def hangup() -> None:
        tls.reload()
        if also is not None:
            also()

    asyncio.get_running_loop().add_signal_handler(signal.SIGHUP, hangup)


def http_address(host: str, port: int, tls: object | None) -> str:
    """The start-up line's address: ``https://`` on a TLS port."""
    from rosettaserve.transport.sockets import url_host

    return f"{'https' if tls is not None else 'http'}://{url_host(host)}:{port}"


def grpc_address(host: str, port: int, tls: object | None) -> str:
    from rosettaserve.transport.sockets import url_host

    return f"{url_host(host)}:{port}{' (tls)' if tls is not None else ''}"
