"""A ``.mar`` version that loads on demand (``load: lazy``) is loaded by the first
``/predictions`` call to it, which waits and is answered, as on every other protocol; a version
that is not there is still TorchServe's 404."""

from __future__ import annotations

import shutil
from pathlib import Path

import httpx

from tests.serverproc import start_server, stop_cleanly


def test_predictions_load_a_lazy_version(store: Path, tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    (repo / "echo" / "1").mkdir(parents=True)
    shutil.copyfile(store / "echo.mar", repo / "echo" / "1" / "model.mar")
    (repo / "echo" / "model.yaml").write_text("runtime: torchserve\nload: lazy\n")
    server = start_server(repo)
    try:
        with httpx.Client(base_url=server.http_url, timeout=120) as client:
            before = client.get("/v2/models/echo/versions/1/ready")
            assert before.status_code != 200  # not loaded until asked for

            answer = client.post("/predictions/echo", json={"a": 1})

            assert answer.status_code == 200, answer.text
            assert answer.json()["value"] == {"a": 1}
            assert client.get("/v2/models/echo/versions/1/ready").status_code == 200
            missing = client.post("/predictions/echo/9", json={"a": 1})
            assert missing.status_code == 404
            assert missing.json()["type"] == "ModelVersionNotFoundException"
    finally:
        stop_cleanly(server)
