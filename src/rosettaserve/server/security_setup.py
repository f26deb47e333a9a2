"""From the security settings to what the ports and the peers' client use, built at start."""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Callable

from rosettaserve.pd.http_client import PeerClient
from rosettaserve.security.keys import Guard, KeySourceError, gather_keys, key_weights
from rosettaserve.security.tls import ServerTls, client_context
from rosettaserve.server.settings import SecurityOptions

log = logging.getLogger("rosettaserve.security")


def check(options: SecurityOptions) -> None:
    """Load every file once before anything starts: TlsError names the one that cannot be used."""
    if options.tls is not None:
        ServerTls(options.tls)
    if options.peer_ca is not None or options.peer_cert is not None:
        client_context(options.peer_ca, options.peer_cert, options.peer_key)


def server_tls(options: SecurityOptions) -> ServerTls | None:
    return None if options.tls is None else ServerTls(options.tls)


def guard(options: SecurityOptions) -> Guard | None:
    return Guard(options.api_keys, options.api_key_weights) if options.api_keys else None


def peer_client(options: SecurityOptions) -> PeerClient:
    """How this process reaches its peers (the PD scheduler its instances, an instance the
    others): HTTPS, the client certificate, the peer API key."""
    context = None
    if options.peer_ca is not None or options.peer_cert is not None:
        context = client_context(options.peer_ca, options.peer_cert, options.peer_key)
    return PeerClient(context, options.peers_secure, options.peer_api_key)


def reload_on_hangup(
    options: SecurityOptions,
    tls: ServerTls | None,
    guard: Guard | None,
    also: Callable[[], None] | None = None,
) -> None:
    """SIGHUP loads the certificate, key and client CA again, and reads the API key files again
    (``also``: passes it on, to the workers). Without TLS or key files, SIGHUP keeps its usual
    meaning."""
    if tls is None and not options.api_key_files:
        return

    def hangup() -> None:
        if tls is not None:
            tls.reload()
        if guard is not None and options.api_key_files:
            reload_keys(options, guard)
        if also is not None:
            also()

    asyncio.get_running_loop().add_signal_handler(signal.SIGHUP, hangup)


def reload_keys(options: SecurityOptions, guard: Guard) -> None:
    """The key files read again (with --api-key's and the environment's keys as at start); a
    file that cannot be used keeps the keys in use, and the log says why."""
    try:
        keys = gather_keys(options.static_keys, options.api_key_files, {})
        weights = key_weights(options.api_key_files)
    except KeySourceError as exc:
        log.error("API key reload failed, the keys in use stay: %s", exc)
        return
    guard.replace(keys, weights)
    log.info("API keys reloaded: %d keys", len(keys))


def http_address(host: str, port: int, tls: object | None) -> str:
    """The start-up line's address: ``https://`` on a TLS port."""
    from rosettaserve.transport.sockets import url_host

    return f"{'https' if tls is not None else 'http'}://{url_host(host)}:{port}"


def grpc_address(host: str, port: int, tls: object | None) -> str:
    from rosettaserve.transport.sockets import url_host

    return f"{url_host(host)}:{port}{' (tls)' if tls is not None else ''}"
