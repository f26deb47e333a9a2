"""Content codings and CORS, the pieces: Accept-Encoding's q values, the inflating bound, what a
preflight and an answer carry for an allowed origin, ``*``, and others."""

from __future__ import annotations

import gzip
import zlib

import pytest

from rosettaserve.core.errors import InvalidInput, PayloadTooLarge
from rosettaserve.transport.content_coding import (
    MIN_COMPRESS_BYTES,
    UnsupportedEncoding,
    accepted_coding,
    compressed,
    inflated,
)
from rosettaserve.transport.cors import Cors
from rosettaserve.transport.routing import HttpResponse


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
