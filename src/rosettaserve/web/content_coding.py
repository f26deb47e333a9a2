"""Content codings of HTTP bodies (RFC 9110 §8.4): gzip and deflate requests inflated, gzip or
deflate answers for clients that accept them.

A request body is inflated with a bound: no more than the request size limit is ever produced,
so a small body that inflates without end (a "zip bomb") is refused with 413 once it passes the
limit, after holding no more memory than a body of the limit's size. Headers that describe the
body (the binary tensor extension's Inference-Header-Content-Length) then count the inflated
bytes, as the clients that send them mean. Codings may be stacked (``gzip, gzip``), at most
``MAX_CODINGS`` of them: each is bounded alike.

Inflating runs on the event loop while it stays within ``INLINE_INFLATED`` bytes a coding (about
a millisecond); a body that inflates to more is inflated again on the request-work threads
(core/executor.py), where zlib lets go of the interpreter: other requests are answered meanwhile.

An answer is compressed when the client accepts gzip (or deflate, tritonclient's other choice),
the body is at least ``MIN_COMPRESS_BYTES`` and not a stream, and no coding is set already.
"""

from __future__ import annotations

import zlib

from rosettaserve.core.errors import InvalidInput, PayloadTooLarge, ServingError
from rosettaserve.core.executor import LargeWork, run_request_work
from rosettaserve.core.status import ErrorKind
from rosettaserve.web.routing import HttpResponse

MIN_COMPRESS_BYTES = 1024  # smaller answers go as they are: compressing costs more than it saves
COMPRESS_LEVEL = 1  # zlib's fastest: the server's time matters more than the last bytes
_INFLATE_WBITS = {
    "gzip": 16 + zlib.MAX_WBITS,
    "x-gzip": 16 + zlib.MAX_WBITS,
    "deflate": zlib.MAX_WBITS,  # a zlib stream, as RFC 9110 defines deflate
}
_DEFLATE_RAW = -zlib.MAX_WBITS  # what some clients send as deflate: tried when zlib's fails
SUPPORTED = "gzip, deflate"
MAX_CODINGS = 2  # stacked codings undone at most (each may cost the limit's worth of inflating)
INLINE_INFLATED = 1 << 20  # inflated on the event loop at most, a coding (zlib: ~1 ms)


class UnsupportedEncoding(ServingError):
    kind = ErrorKind.INVALID_ARGUMENT

    @property
    def http_status(self) -> int:
        return 415  # Unsupported Media Type (RFC 9110 §15.5.16), with Accept-Encoding


async def inflate(encoding: str, body: bytes | bytearray, limit: int) -> bytes | bytearray:
    """The body with its Content-Encoding undone (at most ``limit`` bytes, else 413): on the
    event loop when it is small, on the request-work threads when it is not."""
    try:
        return inflated(encoding, body, limit, INLINE_INFLATED)
    except LargeWork:
        return await run_request_work(inflated, encoding, body, limit)


def inflated(
    encoding: str, body: bytes | bytearray, limit: int, budget: int | None = None
) -> bytes | bytearray:
    """The body with its Content-Encoding undone (at most ``limit`` bytes, else 413); with a
    ``budget``, LargeWork as soon as a coding inflates to more than that."""
    for coding in reversed(codings(encoding)):  # the last one applied is undone first
        wbits = _INFLATE_WBITS[coding]
        body = _inflate(bytes(body), wbits, limit, coding, budget)
    return body


def codings(encoding: str) -> list[str]:
    """The codings a Content-Encoding value lists (identity left out), or 415."""
    found = [c.strip().lower() for c in encoding.split(",")]
    found = [c for c in found if c not in ("identity", "")]
    for coding in found:
        if coding not in _INFLATE_WBITS:
            raise UnsupportedEncoding(
                f"Content-Encoding {coding!r} is not supported (use {SUPPORTED}, or none)",
                headers={"accept-encoding": SUPPORTED},
            )
    if len(found) > MAX_CODINGS:
        raise UnsupportedEncoding(
            f"Content-Encoding lists {len(found)} codings; at most {MAX_CODINGS} are undone",
            headers={"accept-encoding": SUPPORTED},
        )
    return found


def _inflate(body: bytes, wbits: int, limit: int, coding: str, budget: int | None) -> bytes:
    try:
        return _bounded(body, wbits, limit, budget)
    except zlib.error as exc:
        if wbits == zlib.MAX_WBITS:
            try:
                return _bounded(body, _DEFLATE_RAW, limit, budget)
            except zlib.error:
                pass
        raise InvalidInput(f"the {coding} request body cannot be inflated: {exc}") from None


def _bounded(body: bytes, wbits: int, limit: int, budget: int | None) -> bytes:
    """One coding undone: at most ``limit`` + 1 bytes are ever produced (the one past the limit
    says it is passed), or ``budget`` + 1 on the event loop."""
    inflater = zlib.decompressobj(wbits)
    within = limit if budget is None else min(limit, budget)
    out = inflater.decompress(body, within + 1)
    if len(out) > within:
        if within < limit:
            raise LargeWork
        raise PayloadTooLarge(
            f"request body inflates to more than the limit of {limit} bytes "
            "(start the server with a larger --max-request-size)"
        )
    if not inflater.eof:
        raise zlib.error("the compressed body ends before its end")
    if inflater.unused_data:
        raise zlib.error("bytes after the end of the compressed body")
    return out


def accepted_coding(accept: str) -> str:
    """gzip, deflate or "" for an Accept-Encoding value (a coding with q=0 is refused)."""
    best = ""
    for item in accept.lower().split(","):
        name, _, params = item.partition(";")
        name = name.strip()
        if name not in ("gzip", "deflate", "*"):
            continue
        q = params.replace(" ", "")
        if q.startswith("q=0") and q.rstrip("0.") in ("q=", "q"):
            continue  # q=0, q=0.0, q=0.000: not acceptable
        if name in {"gzip", "*"}:
            return "gzip"
        best = "deflate"
    return best


def compressed(response: HttpResponse, accept: str) -> HttpResponse:
    """``response`` compressed as the client accepts (``accept``: its Accept-Encoding), or as it
    is when that is not worth it or not possible."""
    if (
        response.stream is not None
        or response.length < MIN_COMPRESS_BYTES
        or "content-encoding" in response.headers
    ):
        return response
    coding = accepted_coding(accept)
    if not coding:
        return response
    packer = zlib.compressobj(COMPRESS_LEVEL, zlib.DEFLATED, 31 if coding == "gzip" else 15)
    parts = [packer.compress(response.body)]
    parts += [packer.compress(part) for part in response.tail]
    parts.append(packer.flush())
    headers = dict(response.headers)
    headers["content-encoding"] = coding
    vary = headers.get("vary")
    headers["vary"] = f"{vary}, Accept-Encoding" if vary else "Accept-Encoding"
    return HttpResponse(response.status, b"".join(parts), response.content_type, headers)
