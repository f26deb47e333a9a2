"""Triton's logging extension over gRPC with ``tritonclient.grpc`` (REST: tests/integration/
test_log_settings.py): LogSettings reads and changes the settings; a log_file is refused."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import tritonclient.grpc as grpcclient

from tests.response_cache_support import cache_repo
from tests.serverproc import served, start_server
from tests.tritonclient_common import expect_error

DEFAULTS = {
    "log_file": {"string_param": ""},
    "log_info": {"bool_param": True},
    "log_warning": {"bool_param": True},
    "log_error": {"bool_param": True},
    "log_verbose_level": {"uint32_param": 0},
    "log_format": {"string_param": "default"},
}


@pytest.fixture(scope="module")
def grpc(tmp_path_factory: pytest.TempPathFactory) -> Iterator[grpcclient.InferenceServerClient]:
    repo = cache_repo(tmp_path_factory.mktemp("log_repo"))
    for server in served(start_server(repo, "--no-strict-readiness")):
        with grpcclient.InferenceServerClient(server.grpc_address) as client:
            yield client


def settings(answer: dict[str, object]) -> object:
    return answer["settings"]


def test_log_settings_read_and_change(grpc: grpcclient.InferenceServerClient) -> None:
    assert settings(grpc.get_log_settings(as_json=True)) == DEFAULTS
    changed = grpc.update_log_settings({"log_verbose_level": 1, "log_warning": False}, as_json=True)
    assert settings(changed) == DEFAULTS | {
        "log_verbose_level": {"uint32_param": 1},
        "log_warning": {"bool_param": False},
    }
    back = grpc.update_log_settings({"log_verbose_level": 0, "log_warning": True}, as_json=True)
    assert settings(back) == DEFAULTS
    assert "logging" in grpc.get_server_metadata().extensions


def test_a_log_file_is_refused(grpc: grpcclient.InferenceServerClient, tmp_path: Path) -> None:
    target = tmp_path / "client.log"
    update = grpc.update_log_settings
    expect_error(
        lambda: update({"log_file": str(target)}), "StatusCode.UNIMPLEMENTED", "never opens"
    )
    assert not target.exists()
    expect_error(lambda: update({"log_file": None}), "StatusCode.UNIMPLEMENTED", "never opens")
    expect_error(lambda: update({"log_format": "xml"}), "StatusCode.INVALID_ARGUMENT", "log_format")
