"""A small HTTP/1.1 client on asyncio streams: what the scheduler and the instances say to each
other (one connection per exchange; bodies bounded; chunked bodies read chunk by chunk).

A ``PeerClient`` carries how this process reaches its peers (the ``--peer-*`` options), built
once at start by the process (server/security_setup.py) and handed to what talks to peers.
Over HTTPS when the address says so (an ``https://`` URL), or, for an address given without a
scheme (the instances tell each other host and port only), when the client says so; the peer's
certificate is verified, and the peer API key, if any, goes with every request. So only peers
are ever given an address: the scheduler its instances, an instance the ones peers.py admits
(never an address a request named on its own).
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from rosettaserve.core.timeouts import within

log = logging.getLogger("rosettaserve.pd")
MAX_HEAD_BYTES = 64 * 1024
CREDENTIALS = ("authorization", "x-api-key")  # never forwarded: the peer key replaces them


class HttpClientError(OSError):
    """The peer could not be reached, broke the exchange, or answered something unreadable."""


@dataclass
class Address:
    host: str
    port: int
    tls: bool | None = None  # None: as this process's peers are reached (PeerClient.secure)

    @classmethod
    def parse(cls, url: str) -> Address:
        parts = urlsplit(url if "//" in url else f"http://{url}")
        if parts.scheme not in ("http", "https") or not parts.hostname or not parts.port:
            raise ValueError(f"expected http://HOST:PORT or https://HOST:PORT, got {url!r}")
        return cls(parts.hostname, parts.port, parts.scheme == "https")

    def __str__(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


@dataclass
class Response:
    status: int
    headers: dict[str, str]
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    done: bool = field(default=False)

    @property
    def chunked(self) -> bool:
        return "chunked" in self.headers.get("transfer-encoding", "").lower()

    async def read(self, limit: int) -> bytes:
        """The whole body, at most ``limit`` bytes (more is an error)."""
        try:
            if self.chunked:
                parts, size = [], 0
                async for chunk in self.chunks():
                    size += len(chunk)
                    if size > limit:
                        raise HttpClientError(f"the response body is over {limit} bytes")
                    parts.append(chunk)
                return b"".join(parts)
            length = int(self.headers.get("content-length", "0"))
            if length > limit:
                raise HttpClientError(f"the response body of {length} bytes is over {limit}")
            return await self.reader.readexactly(length)
        except (asyncio.IncompleteReadError, ValueError) as exc:
            raise HttpClientError(f"the response body broke off: {exc}") from None
        finally:
            self.close()

    async def chunks(self) -> AsyncIterator[bytes]:
        """The chunks of a chunked body as they arrive."""
        try:
            while True:
                line = await self.reader.readline()
                if not line:
                    raise HttpClientError("the connection closed inside a chunked body")
                size = int(line.split(b";", 1)[0].strip(), 16)
                if size == 0:
                    await self.reader.readline()
                    self.done = True
                    return
                chunk = await self.reader.readexactly(size)
                await self.reader.readexactly(2)
                yield chunk
        except (asyncio.IncompleteReadError, ValueError) as exc:
            raise HttpClientError(f"a chunked body broke off: {exc}") from None

    def close(self) -> None:
        self.writer.close()


@dataclass
class PeerClient:
    """How this process reaches its peers (the ``--peer-*`` options), built once at start."""

    context: ssl.SSLContext | None = None  # for https; None: the system's CAs
    secure: bool = False  # addresses without a scheme are reached over HTTPS
    api_key: str = field(default="", repr=False)  # sent as Authorization: Bearer
    failures: dict[str, str] = field(default_factory=dict)  # the last TLS failure per peer

    def tls(self) -> ssl.SSLContext:
        if self.context is None:
            from rosettaserve.security.tls import client_context

            self.context = client_context(None)
        return self.context

    async def request(
        self,
        address: Address,
        method: str,
        path: str,
        *,
        headers: Mapping[str, str] | None = None,
        body: bytes | bytearray = b"",
        timeout: float = 10.0,
    ) -> Response:
        """Send a request and read the response head (within ``timeout``); the body is the
        caller's."""
        reader, writer = await self._connect(address, timeout)
        try:
            writer.write(self._head(address, method, path, headers or {}, len(body)) + body)
            return await within(_read_head(reader, writer), timeout)
        except TimeoutError:
            writer.close()
            raise HttpClientError(f"{address} did not answer within {timeout:g} s") from None
        except (OSError, asyncio.IncompleteReadError, ValueError) as exc:
            writer.close()
            raise HttpClientError(f"{address} broke the exchange: {exc}") from None

    async def fetch(
        self,
        address: Address,
        method: str,
        path: str,
        *,
        headers: Mapping[str, str] | None = None,
        body: bytes | bytearray = b"",
        timeout: float = 10.0,
        limit: int = 64 * 1024 * 1024,
    ) -> tuple[int, dict[str, str], bytes]:
        response = await self.request(
            address, method, path, headers=headers, body=body, timeout=timeout
        )
        try:
            data = await within(response.read(limit), timeout)
        except TimeoutError:
            response.close()
            raise HttpClientError(f"{address} did not finish its answer in {timeout:g} s") from None
        return response.status, response.headers, data

    async def _connect(
        self, address: Address, timeout: float
    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        secure = self.secure if address.tls is None else address.tls
        tls = self.tls() if secure else None
        try:
            connecting = asyncio.open_connection(address.host, address.port, ssl=tls)
            streams = await within(connecting, timeout)
        except ssl.SSLError as exc:  # the peer's certificate, or ours, was refused
            reason = f"TLS with {address} failed: {exc.reason or exc}"
            if self.failures.get(str(address)) != reason:  # said once, not at every poll
                self.failures[str(address)] = reason
                log.error("%s", reason)
            raise HttpClientError(reason) from None
        except (OSError, TimeoutError) as exc:
            why = exc or type(exc).__name__
            raise HttpClientError(f"cannot connect to {address}: {why}") from None
        if tls is not None and self.failures.pop(str(address), None) is not None:
            log.info("TLS with %s works again", address)
        return streams

    def _head(
        self, address: Address, method: str, path: str, headers: Mapping[str, str], size: int
    ) -> bytes:
        lines = [f"{method} {path} HTTP/1.1", f"host: {address}", f"content-length: {size}"]
        skip = ("host", "content-length", "connection", *CREDENTIALS)
        lines += [f"{k}: {v}" for k, v in headers.items() if k.lower() not in skip]
        if self.api_key:
            lines.append(f"authorization: Bearer {self.api_key}")
        lines.append("connection: close")
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


async def _read_head(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> Response:
    status_line = await reader.readline()
    parts = status_line.split(None, 2)
    if len(parts) < 2 or not parts[0].startswith(b"HTTP/1."):
        raise ValueError(f"not an HTTP response: {status_line[:80]!r}")
    headers: dict[str, str] = {}
    size = len(status_line)
    while True:
        line = await reader.readline()
        size += len(line)
        if size > MAX_HEAD_BYTES:
            raise ValueError("response headers too large")
        if line in (b"\r\n", b"\n"):
            break
        if not line:
            raise asyncio.IncompleteReadError(line, None)
        name, _, value = line.decode("latin-1").partition(":")
        headers[name.strip().lower()] = value.strip()
    return Response(int(parts[1]), headers, reader, writer)
