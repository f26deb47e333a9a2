"""Content codings and CORS, the pieces: Accept-Encoding's q values, the inflating bound (stacked
codings, the event loop's budget), what a preflight and an answer carry for an allowed origin,
``*``, and others."""

from __future__ import annotations

import asyncio
import gzip
import threading
import zlib
from typing import Any

import pytest

from rosettaserve.core.errors import InvalidInput, PayloadTooLarge
from rosettaserve.core.executor import LargeWork
from rosettaserve.web import content_coding
from rosettaserve.web.content_coding import (
    INLINE_INFLATED,
    MAX_CODINGS,
    MIN_COMPRESS_BYTES,
    UnsupportedEncoding,
    accepted_coding,
    compressed,
    inflate,
    inflated,
)
from rosettaserve.web.cors import Cors
from rosettaserve.web.routing import HttpResponse


@pytest.mark.parametrize(
    ("accept", "coding"),
    [
        ("gzip", "gzip"),
        ("deflate", "deflate"),
        ("gzip, deflate, br", "gzip"),
        ("deflate, gzip;q=0", "deflate"),
        ("GZIP;q=0.5", "gzip"),
        ("*", "gzip"),
        ("gzip;q=0, deflate;q=0.000", ""),
        ("identity", ""),
        ("br, zstd", ""),
        ("", ""),
    ],
)
def test_accepted_coding(accept: str, coding: str) -> None:
    assert accepted_coding(accept) == coding


def test_inflated_undoes_each_coding_up_to_the_limit() -> None:
    body = b"x" * 5000
    assert inflated("gzip", gzip.compress(body), 5000) == body
    assert inflated("deflate", zlib.compress(body), 5000) == body
    assert inflated("gzip, identity", gzip.compress(body), 5000) == body
    with pytest.raises(PayloadTooLarge):
        inflated("gzip", gzip.compress(body), 4999)
    with pytest.raises(UnsupportedEncoding) as unsupported:
        inflated("br", body, 5000)
    assert unsupported.value.http_status == 415
    with pytest.raises(InvalidInput, match="bytes after the end"):
        inflated("gzip", gzip.compress(body) + b"junk", 5000)


def test_compressed_only_when_it_is_worth_it() -> None:
    big = HttpResponse(200, b"a" * MIN_COMPRESS_BYTES, tail=(b"b" * 100,))
    packed = compressed(big, "gzip")
    assert packed is not big
    assert packed.headers["content-encoding"] == "gzip"
    assert gzip.decompress(packed.body) == b"a" * MIN_COMPRESS_BYTES + b"b" * 100
    assert big.headers == {}  # the handler's answer is left as it was
    small = HttpResponse(200, b"a" * (MIN_COMPRESS_BYTES - 1))
    assert compressed(small, "gzip") is small
    assert compressed(big, "identity") is big


def test_cors_for_listed_origins() -> None:
    cors = Cors(("https://a.example", "https://b.example/"))
    asked = {
        "origin": "https://b.example",
        "access-control-request-method": "PUT",
        "access-control-request-headers": "x-api-key",
    }
    answer = cors.preflight(asked)
    assert answer is not None
    assert answer.status == 204
    assert answer.headers["access-control-allow-headers"] == "x-api-key"
    headers: dict[str, str] = {"vary": "Accept-Encoding"}
    cors.add_headers(headers, "https://b.example")
    assert headers["access-control-allow-origin"] == "https://b.example"
    assert headers["vary"] == "Accept-Encoding, Origin"
    other: dict[str, str] = {}
    cors.add_headers(other, "https://c.example")
    assert other == {"vary": "Origin"}
    assert cors.preflight({"origin": "https://a.example"}) is None  # not a preflight
    refused = cors.preflight({**asked, "origin": "https://c.example"})
    assert refused is not None
    assert "access-control-allow-methods" not in refused.headers


def test_cors_for_any_origin() -> None:
    cors = Cors(("*",))
    headers: dict[str, str] = {}
    cors.add_headers(headers, "https://anything.example")
    assert headers["access-control-allow-origin"] == "*"
    assert "vary" not in headers
    none: dict[str, str] = {}
    cors.add_headers(none, None)  # not a cross-origin request
    assert none == {}


def test_stacked_codings_are_undone_last_first_and_bounded_in_number() -> None:
    body = b"stacked " * 200
    twice = gzip.compress(zlib.compress(body))  # deflate applied first, then gzip
    assert inflated("deflate, gzip", twice, 5000) == body
    assert inflated("gzip, gzip", gzip.compress(gzip.compress(body)), 5000) == body
    assert inflated("identity, gzip, identity", gzip.compress(body), 5000) == body
    three = gzip.compress(gzip.compress(gzip.compress(body)))
    assert MAX_CODINGS == 2
    with pytest.raises(UnsupportedEncoding, match="lists 3 codings; at most 2") as refused:
        inflated("gzip, gzip, gzip", three, 5000)
    assert refused.value.http_status == 415
    with pytest.raises(UnsupportedEncoding, match="'br'"):  # named before anything is inflated
        inflated("gzip, br", gzip.compress(body), 5000)


def test_a_budget_stops_inflating_once_passed_and_says_so() -> None:
    body = bytes(range(256)) * 40  # 10,240 bytes
    packed = gzip.compress(body)
    assert inflated("gzip", packed, 1 << 20, budget=len(body)) == body
    with pytest.raises(LargeWork):
        inflated("gzip", packed, 1 << 20, budget=len(body) - 1)
    # the limit is checked first: past the limit it is a 413, whatever the budget
    with pytest.raises(PayloadTooLarge):
        inflated("gzip", packed, len(body) - 1, budget=len(body) - 1)
    # each coding has the budget: the outer one inflates within it, the inner one does not
    with pytest.raises(LargeWork):
        inflated("gzip, gzip", gzip.compress(packed), 1 << 20, budget=len(packed) + 10)


def bomb(size: int) -> bytes:
    """``size`` zero bytes, gzipped twice: a few hundred bytes."""
    return gzip.compress(gzip.compress(b"\0" * size, 9), 9)


def test_a_small_body_is_inflated_on_the_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    async def elsewhere(fn: Any, *args: Any) -> Any:
        raise AssertionError("inflated off the loop")

    monkeypatch.setattr(content_coding, "run_request_work", elsewhere)
    body = b"small " * 1000
    assert asyncio.run(inflate("gzip", gzip.compress(body), 1 << 30)) == body


def test_a_large_body_is_inflated_on_the_request_work_threads() -> None:
    size = INLINE_INFLATED * 3
    threads: list[str] = []
    real = content_coding.inflated

    def recorded(*args: Any) -> Any:
        threads.append(threading.current_thread().name)
        return real(*args)

    async def main() -> tuple[bytes | bytearray, str]:
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(content_coding, "inflated", recorded)
            out = await inflate("gzip, gzip", bomb(size), size)
        return out, threading.current_thread().name

    out, loop_thread = asyncio.run(main())
    assert out == b"\0" * size
    assert threads[0] == loop_thread  # tried on the loop within the budget first
    assert threads[1].startswith("model-request-work")  # then done on a thread of its own
    assert len(threads) == 2


def test_a_bomb_is_refused_at_the_limit_off_the_loop() -> None:
    with pytest.raises(PayloadTooLarge):
        asyncio.run(inflate("gzip, gzip", bomb(INLINE_INFLATED * 4), INLINE_INFLATED * 2))
