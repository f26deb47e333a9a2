"""Compressed bodies and CORS on a real server: tritonclient.http's request and response
compression (gzip, deflate; JSON and binary tensors), the size limit on the inflated body (a
zip bomb is a 413 and costs no memory past the limit), and browser preflights with API keys on."""

from __future__ import annotations

import gzip
import json
import zlib
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest
import tritonclient.http as httpclient

from tests.integration.logs_support import logs_repo
from tests.serverproc import ServerProcess, served, start_server

LIMIT = 1 << 20  # the servers' --max-request-size
KEY = "a-test-key-0123456789"
ORIGIN = "https://app.example"
INFER = "/v2/models/identity/infer"


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return logs_repo(tmp_path_factory.mktemp("coding_repo"))


@pytest.fixture(scope="module")
def server(repo: Path) -> Iterator[ServerProcess]:
    yield from served(start_server(repo, "--max-request-size", str(LIMIT), "--no-strict-readiness"))


@pytest.fixture(scope="module")
def http(server: ServerProcess) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.http_url, timeout=30.0) as client:
        yield client


def doc(values: list[float]) -> dict[str, object]:
    return {
        "inputs": [
            {"name": "INPUT0", "shape": [1, len(values)], "datatype": "FP32", "data": values}
        ]
    }


# -- tritonclient.http -------------------------------------------------------------------------


@pytest.mark.parametrize("binary", [True, False], ids=["binary", "json"])
@pytest.mark.parametrize("request_coding", ["gzip", "deflate", None])
@pytest.mark.parametrize("response_coding", ["gzip", "deflate", None])
def test_tritonclient_compression_both_ways(
    server: ServerProcess, binary: bool, request_coding: str | None, response_coding: str | None
) -> None:
    data = np.arange(600, dtype=np.float32).reshape(1, 600) / 7  # answers over 1 KiB
    inp = httpclient.InferInput("INPUT0", list(data.shape), "FP32")
    inp.set_data_from_numpy(data, binary_data=binary)
    out = httpclient.InferRequestedOutput("OUTPUT0", binary_data=binary)
    client = httpclient.InferenceServerClient(server.http_hostport, network_timeout=30.0)
    try:
        result = client.infer(
            "identity",
            [inp],
            outputs=[out],
            request_compression_algorithm=request_coding,
            response_compression_algorithm=response_coding,
        )
    finally:
        client.close()
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), data)


# -- answers -----------------------------------------------------------------------------------


def test_a_large_answer_is_gzipped_for_a_client_that_accepts_it(http: httpx.Client) -> None:
    values = [float(i) for i in range(400)]
    response = http.post(INFER, json=doc(values), headers={"Accept-Encoding": "gzip"})
    assert response.status_code == 200
    assert response.headers["content-encoding"] == "gzip"
    assert "Accept-Encoding" in response.headers["vary"]
    assert int(response.headers["content-length"]) < len(response.content)  # decoded by httpx
    assert response.json()["outputs"][0]["data"] == values


@pytest.mark.parametrize("accept", ["identity", "gzip;q=0", "br"])
def test_no_coding_unless_accepted(http: httpx.Client, accept: str) -> None:
    values = [float(i) for i in range(400)]
    response = http.post(INFER, json=doc(values), headers={"Accept-Encoding": accept})
    assert response.status_code == 200
    assert "content-encoding" not in response.headers


def test_a_small_answer_is_not_compressed(http: httpx.Client) -> None:
    response = http.post(INFER, json=doc([1.0]), headers={"Accept-Encoding": "gzip"})
    assert response.status_code == 200
    assert "content-encoding" not in response.headers


def test_a_stream_is_not_compressed(http: httpx.Client) -> None:
    body = {"str_data": "the quick brown fox " * 80, "model": "words_stream_python"}
    url = "/grps/v1/infer/predict?streaming=true"
    with http.stream("POST", url, json=body, headers={"Accept-Encoding": "gzip"}) as response:
        lines = [json.loads(line) for line in response.iter_lines() if line]
    assert response.status_code == 200
    assert "content-encoding" not in response.headers
    assert len(lines) == 320


# -- request bodies ----------------------------------------------------------------------------


def post_coded(http: httpx.Client, body: bytes, coding: str) -> httpx.Response:
    headers = {"Content-Encoding": coding, "Content-Type": "application/json"}
    return http.post(INFER, content=body, headers=headers)


@pytest.mark.parametrize(
    "pack",
    [gzip.compress, zlib.compress, lambda b: zlib.compress(b)[2:-4]],
    ids=["gzip", "deflate", "raw-deflate"],
)
def test_compressed_request_bodies_are_inflated(http: httpx.Client, pack: object) -> None:
    body = json.dumps(doc([1.5, 2.5])).encode()
    coding = "gzip" if pack is gzip.compress else "deflate"
    response = post_coded(http, pack(body), coding)  # type: ignore[operator]
    assert response.status_code == 200, response.text
    assert response.json()["outputs"][0]["data"] == [1.5, 2.5]


def test_an_unknown_content_encoding_is_a_415_naming_what_is_served(http: httpx.Client) -> None:
    response = post_coded(http, b"\x00" * 10, "br")
    assert response.status_code == 415
    assert "gzip" in response.json()["error"]
    assert response.headers["accept-encoding"] == "gzip, deflate"


@pytest.mark.parametrize("body", [b"not gzip at all", gzip.compress(b'{"inputs": []}')[:-6]])
def test_a_broken_gzip_body_is_a_400(http: httpx.Client, body: bytes) -> None:
    response = post_coded(http, body, "gzip")
    assert response.status_code == 400
    assert "cannot be inflated" in response.json()["error"]


def peak_rss_kib(server: ServerProcess) -> int:
    status = Path(f"/proc/{server.proc.pid}/status").read_text()
    return int(next(line for line in status.splitlines() if line.startswith("VmHWM:")).split()[1])


@pytest.mark.parametrize("coding", ["gzip", "deflate"])
def test_a_zip_bomb_is_a_413_without_memory_growth(
    server: ServerProcess, http: httpx.Client, coding: str
) -> None:
    inflated_size = 512 << 20  # 512 MiB of zeros: well under a MiB compressed
    packer = zlib.compressobj(9, zlib.DEFLATED, 31 if coding == "gzip" else 15)
    chunk = bytes(1 << 20)
    bomb = b"".join(packer.compress(chunk) for _ in range(inflated_size >> 20)) + packer.flush()
    assert len(bomb) < LIMIT
    before = peak_rss_kib(server)
    response = post_coded(http, bomb, coding)
    assert response.status_code == 413
    assert f"limit of {LIMIT} bytes" in response.json()["error"]
    assert peak_rss_kib(server) - before < 64 * 1024  # KiB: the limit, not the bomb
    assert http.post(INFER, json=doc([3.0])).status_code == 200  # still serving


def test_the_limit_counts_the_inflated_body(http: httpx.Client) -> None:
    values = [0.0] * (LIMIT // 4)  # "0.0," each: over the limit once inflated
    body = json.dumps(doc(values)).encode()
    assert len(body) > LIMIT
    response = post_coded(http, gzip.compress(body), "gzip")
    assert response.status_code == 413


# -- CORS --------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def cors_server(repo: Path) -> Iterator[ServerProcess]:
    args = ["--cors-origin", ORIGIN, "--cors-origin", "https://other.example", "--api-key", KEY]
    yield from served(start_server(repo, *args, "--no-strict-readiness"))


@pytest.fixture(scope="module")
def browser(cors_server: ServerProcess) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=cors_server.http_url, timeout=30.0) as client:
        yield client


def preflight(browser: httpx.Client, origin: str, path: str = INFER) -> httpx.Response:
    headers = {
        "Origin": origin,
        "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "authorization, content-type, x-request-id",
    }
    return browser.options(path, headers=headers)


@pytest.mark.parametrize("path", [INFER, "/v1/models/identity:predict", "/v1/chat/completions"])
def test_a_preflight_is_answered_without_a_key(browser: httpx.Client, path: str) -> None:
    response = preflight(browser, ORIGIN, path)
    assert response.status_code == 204
    assert response.headers["access-control-allow-origin"] == ORIGIN
    assert "POST" in response.headers["access-control-allow-methods"]
    assert response.headers["access-control-allow-headers"] == (
        "authorization, content-type, x-request-id"
    )
    assert int(response.headers["access-control-max-age"]) > 0
    assert "Origin" in response.headers["vary"]
    assert "content-length" not in response.headers  # RFC 9110 §8.6: none on a 204
    assert response.content == b""


def test_a_preflight_from_another_origin_gets_no_cors_headers(browser: httpx.Client) -> None:
    response = preflight(browser, "https://evil.example")
    assert "access-control-allow-origin" not in response.headers
    assert "access-control-allow-methods" not in response.headers


def test_answers_carry_the_origin_with_a_key_and_without(browser: httpx.Client) -> None:
    headers = {"Origin": ORIGIN, "Authorization": f"Bearer {KEY}"}
    response = browser.post(INFER, json=doc([1.0]), headers=headers)
    assert response.status_code == 200
    assert response.headers["access-control-allow-origin"] == ORIGIN
    assert "Origin" in response.headers["vary"]
    assert "X-Request-ID" in response.headers["access-control-expose-headers"]
    refused = browser.post(INFER, json=doc([1.0]), headers={"Origin": ORIGIN})
    assert refused.status_code == 401  # the page can read why
    assert refused.headers["access-control-allow-origin"] == ORIGIN


def test_options_that_is_no_preflight_still_needs_what_it_needs(browser: httpx.Client) -> None:
    response = browser.options(INFER, headers={"Origin": ORIGIN})
    assert response.status_code != 204
    assert "access-control-allow-methods" not in response.headers


def test_without_cors_origins_there_are_no_cors_headers(http: httpx.Client) -> None:
    response = http.post(INFER, json=doc([1.0]), headers={"Origin": ORIGIN})
    assert "access-control-allow-origin" not in response.headers
    answer = preflight(http, ORIGIN)
    assert answer.status_code == 405  # OPTIONS is served by no route
    assert "access-control-allow-origin" not in answer.headers
