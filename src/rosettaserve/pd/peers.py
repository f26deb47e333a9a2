"""The peers a prefill or decode instance may contact: the ones it was told of (``--peer-allow``).

A prefill instance hands a request over to the decode instance its ``d-target`` header names,
and a decode instance fetches the KV cache from the prefill instance its hand-over's
``pNodeAddr`` names; both send the peer key (``--peer-api-key``) and the client's prompt there.
Neither address is taken on trust: it must be a known peer, else the request is refused (403)
before any connection is made.

A peer is ``HOST:PORT`` (``[IPv6]:PORT``; an ``http://`` or ``https://`` URL is read the same)
or ``HOST`` alone (every port of that host). An address is compared in its canonical form
(``ipaddress``; an IPv4-mapped IPv6 address is its IPv4 address). A HOST that is a DNS name (a
headless Service, ``localhost``) stands for every address it resolves to, IPv4 and IPv6,
looked up again every ``DEFAULT_INTERVAL_S`` seconds and, at most once a second, when an
address is not found among them (a pod that just joined the name); a look-up that fails keeps
the addresses the name had, and an address that left the name stays known one round more (a
pod being stopped finishes the hand-overs it was given meanwhile). An address given as a name
(a ``pNodeAddr`` of a peer that advertises its host name) is known only if that very name is a
peer: a name a request chose is never looked up. No ``--peer-allow`` at all: no peer is known
and every hand-over is refused.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import re
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from urllib.parse import urlsplit

from rosettaserve.core.errors import Forbidden
from rosettaserve.pd.discovery import DEFAULT_INTERVAL_S, Resolver, every_address, is_name
from rosettaserve.pd.http_client import Address

log = logging.getLogger("rosettaserve.pd")
ANY_PORT = 0
RETRY_S = 1.0  # an unknown address looks the names up again at most this often
_LABEL = r"[a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?"
_NAME = re.compile(rf"{_LABEL}(\.{_LABEL})*")  # a DNS name (at most 253 characters)


class UnknownPeer(Forbidden):
    """An address that is none of this instance's peers (403)."""


@dataclass(frozen=True)
class Peer:
    host: str  # canonical: an IP address's text, or a lower-case name
    port: int  # ANY_PORT: every port

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return host if self.port == ANY_PORT else f"{host}:{self.port}"


def canonical(host: str) -> str:
    """``host`` as addresses are compared: an IP address in ``ipaddress``'s text (brackets
    dropped, an IPv4-mapped IPv6 address as IPv4), else a lower-case name without its final
    dot; ValueError for anything else."""
    text = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    try:
        address = ipaddress.ip_address(text)
    except ValueError:
        name = text.lower().removesuffix(".")
        if len(name) > 253 or not _NAME.fullmatch(name):
            raise ValueError(f"not a host name or IP address: {host!r:.80}") from None
        return name
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return str(address.ipv4_mapped)
    return str(address)


def parse_peer(text: str) -> Peer:
    """``HOST``, ``HOST:PORT``, ``[IPv6]:PORT``, ``[IPv6]`` or ``http(s)://HOST[:PORT]``."""
    given = text.strip()
    if "://" in given:
        parts = urlsplit(given)
        if parts.scheme not in ("http", "https") or parts.path not in ("", "/") or parts.query:
            raise ValueError(f"a peer is HOST, HOST:PORT or http(s)://HOST:PORT, got {text!r}")
        host, port = parts.netloc.rpartition("@")[2], ""
    else:
        host, port = given, ""
    if host.startswith("[") and "]" in host:
        host, _, rest = host[1:].partition("]")
        port = rest.removeprefix(":") if rest.startswith(":") else ("x" if rest else "")
    elif host.count(":") == 1:
        host, _, port = host.partition(":")
    if port and not (port.isascii() and port.isdigit() and 0 < int(port) < 65536):
        raise ValueError(f"a peer's port is a number in [1, 65535], got {text!r}")
    return Peer(canonical(host), int(port) if port else ANY_PORT)


class KnownPeers:
    """The peers of one instance, and the check every address it would contact goes through."""

    def __init__(
        self,
        peers: Iterable[Peer],
        resolver: Resolver = every_address,
        interval: float = DEFAULT_INTERVAL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.peers = tuple(dict.fromkeys(peers))
        self.names = {p for p in self.peers if is_name(p.host)}
        self.resolver, self.interval, self.clock = resolver, interval, clock
        self._found: dict[Peer, set[str]] = {}  # a name's addresses, as last looked up
        self._left: dict[Peer, set[str]] = {}  # the ones that left it at that look-up
        self._known = {(p.host, p.port) for p in self.peers if p not in self.names}
        self._fixed = frozenset(self._known)
        self._at = -float("inf")  # the last look-up of the names
        self._lock = asyncio.Lock()

    def __bool__(self) -> bool:
        return bool(self.peers)

    def __str__(self) -> str:
        return ", ".join(map(str, self.peers)) or "none"

    async def admit(self, address: Address, what: str) -> Address:
        """``address`` if it is a known peer's (the one to connect to), else UnknownPeer,
        which names ``what`` it is (``"decode instance"``, ...)."""
        try:
            host = canonical(address.host)
        except ValueError:
            raise self._refusal(address, what) from None
        if is_name(host):  # never looked up: only a name given as a peer is one
            if not {Peer(host, address.port), Peer(host, ANY_PORT)} & self.names:
                raise self._refusal(address, what)
        elif not await self._knows(host, address.port):
            raise self._refusal(address, what)
        return Address(host, address.port, address.tls)

    async def _knows(self, host: str, port: int) -> bool:
        if self.names and self.clock() - self._at >= self.interval:
            await self.refresh()
        if self._has(host, port):
            return True
        if self.names and self.clock() - self._at >= RETRY_S:  # a pod that just joined?
            await self.refresh()
        return self._has(host, port)

    def _has(self, host: str, port: int) -> bool:
        return (host, port) in self._known or (host, ANY_PORT) in self._known

    def _refusal(self, address: Address, what: str) -> UnknownPeer:
        return UnknownPeer(
            f"{what} {address} is not a known peer of this instance (--peer-allow: {self})"
        )

    async def refresh(self) -> None:
        """Look every name up again (concurrent callers share one round)."""
        asked = self.clock()
        async with self._lock:
            if self._at >= asked:
                return  # a round that ended while this one waited
            for peer in self.names:
                try:
                    found = set(map(canonical, await self.resolver(peer.host, peer.port or 80)))
                except OSError as exc:
                    log.warning("cannot resolve peer %s (%s); its addresses stay", peer, exc)
                    continue
                self._left[peer] = self._found.get(peer, set()) - found
                self._found[peer] = found
            known = set(self._fixed)
            for peer in self.names:
                addresses = self._found.get(peer, set()) | self._left.get(peer, set())
                known |= {(address, peer.port) for address in addresses}
            self._known = known
            self._at = self.clock()
