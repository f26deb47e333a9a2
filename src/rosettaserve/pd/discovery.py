"""Instances found by name: a URL whose host is a DNS name stands for every address it has.

A Kubernetes headless Service answers its name with one A (or AAAA) record per ready pod, so
``--decode http://decode-headless:8000`` means "every decode pod". The scheduler looks such a
name up again every ``--discovery-interval`` seconds (``loop.getaddrinfo``, which runs the
look-up off the event loop) and keeps one instance per address: an address that appears is a
new instance, one that disappears leaves the pool (pool.py lets a leaving decode instance finish
what it was given first). A look-up that fails keeps the instances the name had: their own
health checks still judge them. A URL whose host is an IP address is one fixed instance.

IPv4 addresses are taken when the name has any, else its IPv6 ones: a dual-stack pod has one
of each and is one instance (and the prefill/decode headers carry IPv4 addresses).
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Awaitable, Callable

# (host, port) -> the addresses the host has now; raises OSError when it cannot be resolved
Resolver = Callable[[str, int], Awaitable[list[str]]]

DEFAULT_INTERVAL_S = 10.0


async def resolve(host: str, port: int) -> list[str]:
    """The addresses of ``host``: its IPv4 ones if it has any, else its IPv6 ones; sorted."""
    loop = asyncio.get_running_loop()
    infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    v4 = sorted({str(info[4][0]) for info in infos if info[0] == socket.AF_INET})
    v6 = sorted({str(info[4][0]) for info in infos if info[0] == socket.AF_INET6})
    return v4 or v6


async def every_address(host: str, port: int) -> list[str]:
    """Every address of ``host``, IPv4 and IPv6 alike (a peer may be reached by either); sorted."""
    loop = asyncio.get_running_loop()
    infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return sorted({str(info[4][0]) for info in infos})


def is_name(host: str) -> bool:
    """Whether ``host`` is a name to look up (not an IPv4 or IPv6 address)."""
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return True
    return False
