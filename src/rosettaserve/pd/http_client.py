"""A small HTTP/1.1 client on asyncio streams: what the scheduler and the instances say to each
other (one connection per exchange; bodies bounded; chunked bodies read chunk by chunk)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from urllib.parse import urlsplit

MAX_HEAD_BYTES = 64 * 1024


class HttpClientError(OSError):
    """The peer could not be reached, broke the exchange, or answered something unreadable."""


@dataclass
class Address:
    host: str
    port: int

    @classmethod
    def parse(cls, url: str) -> Address:
        parts = urlsplit(url if "//" in url else f"http://{url}")
        if parts.scheme != "http" or not parts.hostname or not parts.port:
            raise ValueError(f"expected http://HOST:PORT, got {url!r}")
        return cls(parts.hostname, parts.port)

    @property
    def url(self) -> str:
        return f"http://{self}"

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


async def request(
    address: Address,
    method: str,
    path: str,
    *,
    headers: Mapping[str, str] | None = None,
    body: bytes | bytearray = b"",
    timeout: float = 10.0,
) -> Response:
    """Send a request and read the response head (within ``timeout``); the body is the caller's."""
    try:
        reader, writer = await asyncio.wait_for(
            asyncio.open_connection(address.host, address.port), timeout
        )
    except (OSError, TimeoutError) as exc:
        raise HttpClientError(f"cannot connect to {address}: {exc or type(exc).__name__}") from None
    try:
        writer.write(_head(address, method, path, headers or {}, len(body)) + body)
        return await asyncio.wait_for(_read_head(reader, writer), timeout)
    except TimeoutError:
        writer.close()
        raise HttpClientError(f"{address} did not answer within {timeout:g} s") from None
    except (OSError, asyncio.IncompleteReadError, ValueError) as exc:
        writer.close()
        raise HttpClientError(f"{address} broke the exchange: {exc}") from None


async def fetch(
    address: Address,
    method: str,
    path: str,
    *,
    headers: Mapping[str, str] | None = None,
    body: bytes | bytearray = b"",
    timeout: float = 10.0,
    limit: int = 64 * 1024 * 1024,
) -> tuple[int, dict[str, str], bytes]:
    response = await request(address, method, path, headers=headers, body=body, timeout=timeout)
    try:
        data = await asyncio.wait_for(response.read(limit), timeout)
    except TimeoutError:
        response.close()
        raise HttpClientError(f"{address} did not finish its answer in {timeout:g} s") from None
    return response.status, response.headers, data


def _head(address: Address, method: str, path: str, headers: Mapping[str, str], size: int) -> bytes:
    lines = [f"{method} {path} HTTP/1.1", f"host: {address}", f"content-length: {size}"]
    skip = ("host", "content-length", "connection")
    lines += [f"{k}: {v}" for k, v in headers.items() if k.lower() not in skip]
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
