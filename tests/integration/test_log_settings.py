"""Triton's logging extension on a real server with tritonclient.http (gRPC:
tests_tritongrpc/test_log_settings_tritongrpc.py): the settings read and changed at run time,
INFO lines (access lines among them) switched off and on again, bad values refused with nothing
changed, a log_file refused (no file is ever opened), and the routes behind the API key."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import tritonclient.http as httpclient

from tests.response_cache_support import cache_repo, inputs
from tests.serverproc import ServerProcess, served, start_server, wait_for
from tests.tritonclient_common import expect_error

KEY = "log-settings-key"
AUTH = {"Authorization": f"Bearer {KEY}"}
DEFAULTS = {
    "log_file": "",
    "log_info": True,
    "log_warning": True,
    "log_error": True,
    "log_verbose_level": 0,
    "log_format": "default",
}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    repo = cache_repo(tmp_path_factory.mktemp("log_repo"))
    yield from served(start_server(repo, "--no-strict-readiness", "--api-key", KEY))


@pytest.fixture(scope="module")
def client(server: ServerProcess) -> Iterator[httpclient.InferenceServerClient]:
    with httpclient.InferenceServerClient(server.http_hostport) as c:
        yield c


def read(client: httpclient.InferenceServerClient) -> dict[str, object]:
    found: dict[str, object] = client.get_log_settings(headers=AUTH)
    return found


def update(client: httpclient.InferenceServerClient, settings: dict[str, object]) -> object:
    return client.update_log_settings(settings, headers=AUTH)


def marked_request(client: httpclient.InferenceServerClient, marker: str) -> None:
    """A request whose access line carries ``marker`` (its X-Request-ID)."""
    headers = AUTH | {"X-Request-ID": marker}
    httpclient.InferenceServerClient.infer(
        client, "uncached", inputs(httpclient, [1.0], [b"x"]), headers=headers
    )


def test_settings_read_as_triton_answers_them(client: httpclient.InferenceServerClient) -> None:
    assert read(client) == DEFAULTS
    assert "logging" in client.get_server_metadata(headers=AUTH)["extensions"]


def test_info_lines_stop_and_come_back(
    server: ServerProcess, client: httpclient.InferenceServerClient
) -> None:
    marked_request(client, "before-off")
    wait_for(lambda: any("before-off" in line for line in server.lines))
    assert update(client, {"log_info": False}) == DEFAULTS | {"log_info": False}
    marked_request(client, "while-off")
    assert update(client, {"log_info": True}) == DEFAULTS
    marked_request(client, "after-on")
    wait_for(lambda: any("after-on" in line for line in server.lines))
    assert not any("while-off" in line for line in server.lines)


def test_verbose_level_and_format_change(client: httpclient.InferenceServerClient) -> None:
    changed = update(client, {"log_verbose_level": 2, "log_format": "json"})
    assert changed == DEFAULTS | {"log_verbose_level": 2, "log_format": "json"}
    assert update(client, {"log_verbose_level": 0, "log_format": "default"}) == DEFAULTS


@pytest.mark.parametrize(
    ("settings", "fragment"),
    [
        ({"log_verbose_level": -1}, "'log_verbose_level' must be an integer >= 0"),
        ({"log_info": "yes"}, "'log_info' must be a boolean"),
        ({"log_format": "ISO9999"}, "'log_format' must be one of"),
        ({"log_info": False, "log_format": "xml"}, "'log_format' must be one of"),
    ],
)
def test_bad_values_are_refused_and_nothing_changes(
    client: httpclient.InferenceServerClient, settings: dict[str, object], fragment: str
) -> None:
    expect_error(lambda: update(client, settings), "400", fragment)
    assert read(client) == DEFAULTS


def test_a_log_file_is_refused_and_never_opened(
    client: httpclient.InferenceServerClient, tmp_path: Path
) -> None:
    target = tmp_path / "client-chosen.log"
    expect_error(lambda: update(client, {"log_file": str(target)}), "501", "never opens")
    assert not target.exists()
    assert read(client) == DEFAULTS


def test_the_routes_need_the_api_key(server: ServerProcess) -> None:
    url = f"{server.http_url}/v2/logging"
    assert httpx.get(url, timeout=10).status_code == 401
    assert httpx.post(url, json={"log_info": False}, timeout=10).status_code == 401
    ok = httpx.get(url, headers={"x-api-key": KEY}, timeout=10)
    assert ok.json() == DEFAULTS
