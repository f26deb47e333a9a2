"""What a version folder may hold besides model.mar: the archive unpacked, an archive under
another name (parameters.file); and what a handler that cannot initialise leaves behind."""

from __future__ import annotations

import json
import shutil
import zipfile
from pathlib import Path

import httpx

from tests.serverproc import start_server, stop_cleanly, wait_for
from tests_torchserve.build_archives import HANDLERS

BROKEN = """\
def handle(data, context):
    raise RuntimeError("this handler cannot start")
"""


def manifest(handler: str) -> str:
    return json.dumps({"runtime": "python", "model": {"modelName": "x", "handler": handler}})


def test_unpacked_and_renamed_archives_and_a_broken_handler(store: Path, tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    unpacked = repo / "unpacked" / "1"
    (unpacked / "MAR-INF").mkdir(parents=True)
    (unpacked / "MAR-INF" / "MANIFEST.json").write_text(manifest("echo_handler.py"))
    shutil.copyfile(HANDLERS / "echo_handler.py", unpacked / "echo_handler.py")
    (repo / "unpacked" / "model.yaml").write_text("runtime: torchserve\n")
    (repo / "renamed" / "1").mkdir(parents=True)
    shutil.copyfile(store / "echo.mar", repo / "renamed" / "1" / "echo-v1.mar")
    (repo / "renamed" / "model.yaml").write_text(
        "runtime: torchserve\nparameters: {file: echo-v1.mar}\n"
    )
    (repo / "broken" / "1").mkdir(parents=True)
    with zipfile.ZipFile(repo / "broken" / "1" / "model.mar", "w") as zf:
        zf.writestr("MAR-INF/MANIFEST.json", manifest("broken.py"))
        zf.writestr("broken.py", BROKEN)
    (repo / "broken" / "model.yaml").write_text("runtime: torchserve\n")
    server = start_server(repo, wait_ready=False)  # (never ready: one model fails)
    try:
        url = server.http_url
        wait_for(lambda: any(" 2 ready" in line for line in server.lines))  # the load's summary
        for name in ("unpacked", "renamed"):
            answer = httpx.post(f"{url}/predictions/{name}", json={"a": 1})
            assert answer.status_code == 200, answer.text
            assert answer.json()["model_name"] == name
        r = httpx.post(f"{url}/predictions/broken", json={})
        assert (r.status_code, r.json()["type"]) == (404, "ModelNotFoundException")
        assert httpx.get(f"{url}/v2/models/broken/ready").status_code != 200
        assert "this handler cannot start" in "\\n".join(server.lines)
    finally:
        stop_cleanly(server)
