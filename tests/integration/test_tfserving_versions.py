"""Model status of a version that failed to load, next to one that serves (TF's END state)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.serverproc import ServerProcess, start_server

MODEL_PY = """
import numpy as np
from rosettaserve import Model


class Echo(Model):
    def predict(self, inputs):
        return {"y": inputs["x"]}
"""
BROKEN_PY = """
from rosettaserve import Model


class Broken(Model):
    def load(self):
        raise RuntimeError("weights corrupted")
"""


@pytest.fixture(scope="module")
def flaky(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """Model ``flaky``: version 1 serves, version 2 fails to load."""
    repo = tmp_path_factory.mktemp("tfs_versions")
    model = repo / "flaky"
    (model / "1").mkdir(parents=True)
    (model / "2").mkdir()
    (model / "model.py").write_text(MODEL_PY)
    (model / "2" / "model.py").write_text(BROKEN_PY)  # a version's own model.py wins
    (model / "model.yaml").write_text(
        "runtime: python\nversion_policy: {all: true}\nlabels: {stable: 1, next: 2}\n"
        "inputs: [{name: x, datatype: FP32, shape: [-1]}]\n"
        "outputs: [{name: y, datatype: FP32, shape: [-1]}]\n"
    )
    proc = start_server(Path(repo), "--no-strict-readiness")
    yield proc
    assert proc.stop() == 0


def test_a_failed_version_is_end_with_its_error(flaky: ServerProcess) -> None:
    url = flaky.http_url + "/v1/models/flaky"
    status = httpx.get(url).json()["model_version_status"]
    assert [(s["version"], s["state"]) for s in status] == [("2", "END"), ("1", "AVAILABLE")]
    assert status[0]["status"]["error_code"] == "UNKNOWN"
    assert "weights corrupted" in status[0]["status"]["error_message"]
    assert status[1]["status"] == {"error_code": "OK", "error_message": ""}


def test_requests_go_to_the_highest_available_version(flaky: ServerProcess) -> None:
    url = flaky.http_url + "/v1/models/flaky"
    assert httpx.post(url + ":predict", json={"instances": [1.0]}).json() == {"predictions": [1.0]}
    assert httpx.get(url + "/metadata").json()["model_spec"]["version"] == "1"
    for path in ("/versions/2:predict", "/labels/next:predict"):
        response = httpx.post(url + path, json={"instances": [1.0]})
        assert response.status_code == 404
        assert response.json() == {"error": "Servable not found for request: Specific(flaky, 2)"}
