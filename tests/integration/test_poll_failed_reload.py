"""Polling sees an edit of a model folder that fails to load: the versions that were serving keep
serving (as in TF Serving and Triton), the failure is in the log and the repository index, and a
later fixed edit loads as usual. A real server process, driven by tritonclient and httpx."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest
import tritonclient.http as triton_http
from tritonclient.utils import InferenceServerException

from tests.conftest import EXAMPLES
from tests.integration.logs_support import wait_for_lines
from tests.serverproc import ServerProcess, start_server, stop_cleanly, wait_for

BROKEN_LOAD = (
    "from rosettaserve import Model\n\n\nclass Scale(Model):\n"
    "    def load(self):\n        raise RuntimeError('weights corrupted')\n"
)


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    shutil.copytree(EXAMPLES / "versioned_python", tmp_path / "scaled")
    return tmp_path


@pytest.fixture
def server(repo: Path) -> Iterator[ServerProcess]:
    proc = start_server(repo, "--poll-interval", "0.1", "--enable-model-control")
    yield proc
    stop_cleanly(proc)


def scaled(client: triton_http.InferenceServerClient, value: float, version: str = "2") -> float:
    tensor = triton_http.InferInput("INPUT0", [1, 1], "FP32")
    tensor.set_data_from_numpy(np.array([[value]], dtype=np.float32))
    result = client.infer("scaled", [tensor], model_version=version)
    return float(result.as_numpy("OUTPUT0")[0, 0])


def replace(path: Path, text: str) -> None:
    """Write ``path`` as an editor does, all at once (a poll never sees it half written)."""
    staged = path.with_name(path.name + ".tmp")
    staged.write_text(text)
    staged.replace(path)


def index_reasons(server: ServerProcess) -> dict[str, str]:
    rows = httpx.post(server.http_url + "/v2/repository/index", timeout=10).json()
    return {row["version"]: row["reason"] for row in rows if row["name"] == "scaled"}


def test_an_invalid_model_yaml_edit_keeps_the_old_definition_serving(
    repo: Path, server: ServerProcess
) -> None:
    client = triton_http.InferenceServerClient(server.http_hostport)
    assert scaled(client, 3) == 6.0
    config = repo / "scaled" / "model.yaml"
    good = config.read_text()
    replace(config, good.replace("max_batch_size: 8", "max_batch_sise: 8"))
    wait_for(lambda: "did you mean max_batch_size" in index_reasons(server).get("2", ""), 20)

    assert scaled(client, 3) == 6.0
    assert scaled(client, 3, "1") == 3.0
    assert client.is_server_ready()
    assert client.is_model_ready("scaled", "2")
    assert set(index_reasons(server)) == {"1", "2"}
    meta = client.get_model_metadata("scaled", "2")
    assert "max_batch_sise: did you mean max_batch_size?" in meta["properties"]["reason"]
    errors = wait_for_lines(server, lambda line: " ERROR " in line and "keep serving" in line)
    assert len(errors) == 1, server.lines  # once, not again at every poll
    assert "model scaled" in errors[0]
    assert "max_batch_sise" in errors[0]

    replace(config, good.replace("factor: 2.0", "factor: 10.0"))
    wait_for(lambda: scaled(client, 3) == 30.0, 20)
    assert index_reasons(server) == {"1": "", "2": ""}
    assert client.is_server_ready()


def test_a_new_version_that_fails_to_load_leaves_the_served_ones(
    repo: Path, server: ServerProcess
) -> None:
    client = triton_http.InferenceServerClient(server.http_hostport)
    staged, broken = repo / ".staged", repo / "scaled" / "3"  # hidden: not a model
    staged.mkdir()
    (staged / "model.py").write_text(BROKEN_LOAD)
    staged.rename(broken)  # the version folder appears whole
    wait_for(lambda: "weights corrupted" in index_reasons(server).get("2", ""), 20)

    assert client.get_model_metadata("scaled")["versions"] == ["1", "2"]
    assert scaled(client, 3) == 6.0
    assert client.is_server_ready()
    wait_for_lines(server, lambda line: " ERROR " in line and "weights corrupted" in line)

    replace(broken / "model.py", (repo / "scaled" / "2" / "model.py").read_text())
    wait_for(lambda: client.get_model_metadata("scaled")["versions"] == ["1", "2", "3"], 20)
    assert scaled(client, 3, "3") == 6.0
    assert index_reasons(server) == {"1": "", "2": "", "3": ""}


def test_an_explicit_load_that_fails_keeps_the_serving_version(repo: Path) -> None:
    server = start_server(repo, "--enable-model-control")  # no polling: loads on request only
    try:
        client = triton_http.InferenceServerClient(server.http_hostport)
        config = repo / "scaled" / "model.yaml"
        replace(config, config.read_text().replace("max_batch_size: 8", "max_batch_sise: 8"))
        with pytest.raises(InferenceServerException, match="did you mean max_batch_size"):
            client.load_model("scaled")
        assert scaled(client, 3) == 6.0
        assert client.is_server_ready()
        assert "did you mean max_batch_size" in index_reasons(server)["2"]
    finally:
        stop_cleanly(server)
