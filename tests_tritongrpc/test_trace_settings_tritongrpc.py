"""Triton's trace extension over gRPC with ``tritonclient.grpc`` (REST, and the spans the settings
decide: tests/integration/test_trace_settings.py): TraceSetting reads and changes the server's
and a model's settings; a trace_file is refused."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import tritonclient.grpc as grpcclient

from tests.response_cache_support import cache_repo
from tests.serverproc import served, start_server
from tests.tritonclient_common import expect_error

SERVER = {
    "trace_level": {"value": ["TIMESTAMPS"]},
    "trace_rate": {"value": ["1"]},
    "trace_count": {"value": ["-1"]},
    "trace_mode": {"value": ["opentelemetry"]},
}


@pytest.fixture(scope="module")
def grpc(tmp_path_factory: pytest.TempPathFactory) -> Iterator[grpcclient.InferenceServerClient]:
    repo = cache_repo(tmp_path_factory.mktemp("trace_repo"))
    args = ("--no-strict-readiness", "--otel-exporter", "console")
    for server in served(start_server(repo, *args)):
        with grpcclient.InferenceServerClient(server.grpc_address) as client:
            yield client


def settings(answer: dict[str, object]) -> object:
    return answer["settings"]


def test_trace_settings_read_and_change(grpc: grpcclient.InferenceServerClient) -> None:
    assert settings(grpc.get_trace_settings(as_json=True)) == SERVER
    changed = grpc.update_trace_settings(
        model_name="uncached", settings={"trace_rate": "4", "trace_level": ["OFF"]}, as_json=True
    )
    assert settings(changed) == SERVER | {
        "trace_rate": {"value": ["4"]},
        "trace_level": {"value": ["OFF"]},
    }
    assert settings(grpc.get_trace_settings(as_json=True)) == SERVER
    cleared = grpc.update_trace_settings(
        model_name="uncached", settings={"trace_rate": None, "trace_level": None}, as_json=True
    )
    assert settings(cleared) == SERVER
    assert "trace" in grpc.get_server_metadata().extensions


def test_a_trace_file_is_refused(grpc: grpcclient.InferenceServerClient) -> None:
    expect_error(
        lambda: grpc.update_trace_settings(settings={"trace_file": "/tmp/x"}),
        "StatusCode.UNIMPLEMENTED",
        "never opens",
    )
    expect_error(
        lambda: grpc.update_trace_settings(settings={"trace_count": "-5"}),
        "StatusCode.INVALID_ARGUMENT",
        "trace_count",
    )
