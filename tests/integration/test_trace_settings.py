"""Triton's trace extension on a real server with tritonclient.http (gRPC:
tests_tritongrpc/test_trace_settings_tritongrpc.py) and the OpenTelemetry console exporter: the
settings decide which requests have spans: a model's trace_level OFF, its trace_rate (one in N)
and trace_count (how many more); null goes back to the server's settings; trace_file is refused
and never opened; without --otel-exporter a level is refused."""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import tritonclient.http as httpclient

from tests.response_cache_support import cache_repo
from tests.serverproc import ServerProcess, served, start_server, stop_cleanly, wait_for
from tests.tritonclient_common import expect_error

TIMEOUT_S = 30.0
SERVER = {
    "trace_level": ["TIMESTAMPS"],
    "trace_rate": "1",
    "trace_count": "-1",
    "trace_mode": "opentelemetry",
}
BODY = {
    "inputs": [
        {"name": "X", "datatype": "FP32", "shape": [1], "data": [1.0]},
        {"name": "T", "datatype": "BYTES", "shape": [1], "data": ["t"]},
    ]
}


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return cache_repo(tmp_path_factory.mktemp("trace_repo"))


@pytest.fixture(scope="module")
def server(repo: Path) -> Iterator[ServerProcess]:
    yield from served(start_server(repo, "--no-strict-readiness", "--otel-exporter", "console"))


@pytest.fixture(scope="module")
def client(server: ServerProcess) -> Iterator[httpclient.InferenceServerClient]:
    with httpclient.InferenceServerClient(server.http_hostport) as c:
        yield c


def traced_ids(server: ServerProcess) -> set[str]:
    """The trace ids (hex, without the printed 0x) of every span the server has printed."""
    return {
        json.loads(line)["context"]["trace_id"].removeprefix("0x")
        for line in list(server.lines)
        if line.startswith("{") and '"context"' in line
    }


def infer(server: ServerProcess, model: str) -> str:
    """One request with a trace id of its own (its traceparent): the id."""
    trace = secrets.token_hex(16)
    headers = {"traceparent": f"00-{trace}-{secrets.token_hex(8)}-01"}
    url = f"{server.http_url}/v2/models/{model}/infer"
    assert httpx.post(url, json=BODY, headers=headers, timeout=TIMEOUT_S).is_success
    return trace


def traced(server: ServerProcess, *traces: str) -> list[bool]:
    """Which of ``traces`` have spans, once a request traced after them has printed its own
    (spans are printed in order, so theirs would be there by then)."""
    marker = infer(server, "cached")  # the server's settings trace every request of it
    wait_for(lambda: marker in traced_ids(server), TIMEOUT_S)
    found = traced_ids(server)
    return [t in found for t in traces]


def test_the_settings_read_as_triton_answers_them(
    client: httpclient.InferenceServerClient,
) -> None:
    assert client.get_trace_settings() == SERVER
    assert client.get_trace_settings(model_name="uncached") == SERVER
    assert "trace" in client.get_server_metadata()["extensions"]


def test_a_models_level_off_stops_its_traces(
    server: ServerProcess, client: httpclient.InferenceServerClient
) -> None:
    off = client.update_trace_settings("uncached", {"trace_level": ["OFF"]})
    assert off == SERVER | {"trace_level": ["OFF"]}
    assert client.get_trace_settings() == SERVER  # the server's are unchanged
    assert traced(server, infer(server, "uncached")) == [False]
    back = client.update_trace_settings("uncached", {"trace_level": None})
    assert back == SERVER
    assert traced(server, infer(server, "uncached")) == [True]


def test_rate_samples_one_in_n_and_count_limits(
    server: ServerProcess, client: httpclient.InferenceServerClient
) -> None:
    client.update_trace_settings("uncached", {"trace_rate": "2"})

    def infer_and_look(model: str) -> str:  # (reading its metadata is no inference)
        client.get_model_metadata(model)
        return infer(server, model)

    assert traced(server, *(infer_and_look("uncached") for _ in range(4))) == [
        True,
        False,
        True,
        False,
    ]
    client.update_trace_settings("uncached", {"trace_rate": "1", "trace_count": "1"})
    assert traced(server, *(infer(server, "uncached") for _ in range(2))) == [True, False]
    assert client.get_trace_settings(model_name="uncached")["trace_count"] == "0"
    reset = {"trace_rate": None, "trace_count": None, "trace_level": None}
    assert client.update_trace_settings("uncached", reset) == SERVER


@pytest.mark.parametrize(
    ("settings", "status", "fragment"),
    [
        ({"trace_level": ["OFF", "TIMESTAMPS"]}, "400", "only one trace level 'OFF'"),
        ({"trace_level": ["LOUD"]}, "400", "'trace_level' must be"),
        ({"trace_rate": "zero"}, "400", "Unable to parse 'trace_rate'"),
        ({"trace_count": "-2"}, "400", "Unable to parse 'trace_count'"),
    ],
)
def test_bad_values_are_refused_and_nothing_changes(
    client: httpclient.InferenceServerClient, settings: dict[str, Any], status: str, fragment: str
) -> None:
    expect_error(lambda: client.update_trace_settings(settings=settings), status, fragment)
    assert client.get_trace_settings() == SERVER


def test_a_trace_file_is_refused_and_never_opened(
    client: httpclient.InferenceServerClient, tmp_path: Path
) -> None:
    target = tmp_path / "client-chosen.json"
    expect_error(
        lambda: client.update_trace_settings(settings={"trace_file": str(target)}),
        "501",
        "never opens",
    )
    assert not target.exists()


def test_an_unknown_model_is_refused(client: httpclient.InferenceServerClient) -> None:
    expect_error(lambda: client.get_trace_settings(model_name="nope"), "404", "nope")


def test_without_an_exporter_the_level_is_off_and_stays_off(repo: Path) -> None:
    proc = start_server(repo, "--no-strict-readiness")
    try:
        with httpclient.InferenceServerClient(proc.http_hostport) as c:
            assert c.get_trace_settings() == SERVER | {"trace_level": ["OFF"]}
            expect_error(
                lambda: c.update_trace_settings(settings={"trace_level": ["TIMESTAMPS"]}),
                "501",
                "--otel-exporter",
            )
    finally:
        stop_cleanly(proc)
