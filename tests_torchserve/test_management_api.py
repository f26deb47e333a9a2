"""TorchServe's management API, asserted the same of the real TorchServe (its management port)
and of rosettaserve (``--enable-model-control``, on the HTTP port)."""

from __future__ import annotations

import shutil
from pathlib import Path

import httpx

from tests.serverproc import start_server, stop_cleanly
from tests_torchserve.build_archives import MODEL_YAML, build_repository
from tests_torchserve.conftest import MODELS, Peer


def test_models_are_listed_sorted_and_paged(peer: Peer) -> None:
    r = peer.management.get("/models")
    assert r.status_code == 200
    names = [m["modelName"] for m in r.json()["models"]]
    assert names == sorted(MODELS)
    assert set(r.json()["models"][0]) == {"modelName", "modelUrl"}
    page = peer.management.get("/models", params={"limit": 2}).json()
    assert [m["modelName"] for m in page["models"]] == sorted(MODELS)[:2]
    assert page["nextPageToken"] == "2"
    rest = peer.management.get("/models", params={"limit": 2, "next_page_token": 4}).json()
    assert [m["modelName"] for m in rest["models"]] == sorted(MODELS)[4:]
    assert "nextPageToken" not in rest


def test_a_model_is_described_as_torchserve_describes_it(peer: Peer) -> None:
    r = peer.management.get("/models/batch")
    assert r.status_code == 200
    (doc,) = r.json()
    assert {k: doc[k] for k in ("modelName", "modelVersion", "batchSize", "maxBatchDelay")} == {
        "modelName": "batch",
        "modelVersion": "1",
        "batchSize": 4,
        "maxBatchDelay": 5000,
    }
    assert [w["status"] for w in doc["workers"]] == ["READY"]
    assert (doc["minWorkers"], doc["maxWorkers"], doc["loadedAtStartup"]) == (1, 1, True)
    assert doc["runtime"] == "python"
    assert [d["modelVersion"] for d in peer.management.get("/models/batch/all").json()] == ["1"]
    assert peer.management.get("/models/batch/1").json()[0]["modelName"] == "batch"


def test_describing_what_is_not_there(peer: Peer) -> None:
    r = peer.management.get("/models/nope")
    assert (r.status_code, r.json()) == (
        404,
        {"code": 404, "type": "ModelNotFoundException", "message": "Model not found: nope"},
    )
    r = peer.management.get("/models/batch/7")
    assert r.status_code == 404
    assert r.json()["type"] == "ModelVersionNotFoundException"


def test_an_archive_of_the_store_is_registered_and_unregistered(peer: Peer) -> None:
    assert peer.inference.post("/predictions/extra", json={}).status_code == 404
    params = {"url": "extra.mar", "initial_workers": 1, "synchronous": "true"}
    r = peer.management.post("/models", params=params)
    assert r.status_code == 200, r.text
    assert r.json() == {"status": 'Model "extra" Version: 1 registered with 1 initial workers'}
    answer = peer.inference.post("/predictions/extra", json={"a": 1})
    assert answer.status_code == 200
    assert answer.json()["model_name"] == "extra"
    again = peer.management.post("/models", params=params)
    assert again.status_code == 409
    assert again.json()["type"] == "ConflictStatusException"
    r = peer.management.delete("/models/extra")
    assert (r.status_code, r.json()) == (200, {"status": 'Model "extra" unregistered'})
    assert peer.inference.post("/predictions/extra", json={}).status_code == 404
    assert peer.management.delete("/models/extra").status_code == 404


def test_registering_needs_a_url(peer: Peer) -> None:
    r = peer.management.post("/models")
    assert (r.status_code, r.json()["message"]) == (400, "Parameter url is required.")


def test_workers_are_scaled(peer: Peer) -> None:
    r = peer.management.put("/models/linear", params={"min_worker": 2, "synchronous": "true"})
    assert (r.status_code, r.json()) == (200, {"status": "Workers scaled to 2 for model: linear"})
    (doc,) = peer.management.get("/models/linear").json()
    assert (doc["minWorkers"], len(doc["workers"])) == (2, 2)
    assert peer.inference.post("/predictions/linear", json=[1, 2, 3, 4]).status_code == 200
    r = peer.management.put("/models/linear/1", params={"min_worker": 1, "synchronous": "true"})
    assert r.json() == {"status": "Workers scaled to 1 for model: linear, version: 1"}
    r = peer.management.put("/models/linear", params={"min_worker": 1})
    assert (r.status_code, r.json()) == (202, {"status": "Processing worker updates..."})
    r = peer.management.put("/models/linear", params={"min_worker": 3, "max_worker": 2})
    assert (r.status_code, r.json()["message"]) == (
        400,
        "max_worker cannot be less than min_worker.",
    )
    assert peer.management.put("/models/nope", params={"min_worker": 1}).status_code == 404


def test_set_default(peer: Peer) -> None:
    r = peer.management.put("/models/echo/1/set-default")
    status = 'Default version successfully updated for model "echo" to "1"'
    assert (r.status_code, r.json()) == (200, {"status": status})
    r = peer.management.put("/models/echo/9/set-default")
    assert (r.status_code, r.json()["type"]) == (404, "ModelVersionNotFoundException")
    r = peer.management.put("/models/nope/1/set-default")
    assert (r.status_code, r.json()["type"]) == (404, "ModelNotFoundException")


def test_the_default_version_is_the_highest_until_set_default(store: Path, tmp_path: Path) -> None:
    """Two archives as versions 1 (linear) and 2 (echo) of one model: the highest serves
    until set-default names another."""
    repo = tmp_path / "repo"
    for version, archive in (("1", "linear"), ("2", "echo")):
        (repo / "mixed" / version).mkdir(parents=True)
        shutil.copyfile(store / f"{archive}.mar", repo / "mixed" / version / "model.mar")
    (repo / "mixed" / "model.yaml").write_text(MODEL_YAML + "version_policy: {all: true}\n")
    server = start_server(repo, "--enable-model-control")
    try:
        url = server.http_url
        assert "keys" in httpx.post(f"{url}/predictions/mixed", json=[1, 2, 3, 4]).json()
        assert httpx.get(f"{url}/models/mixed").json()[0]["modelVersion"] == "2"
        assert httpx.put(f"{url}/models/mixed/1/set-default").status_code == 200
        answer = httpx.post(f"{url}/predictions/mixed", json=[1, 2, 3, 4]).json()
        assert len(answer) == 1
        assert len(answer[0]) == 2  # linear's two outputs
        assert httpx.get(f"{url}/models/mixed").json()[0]["modelVersion"] == "1"
        versions = [d["modelVersion"] for d in httpx.get(f"{url}/models/mixed/all").json()]
        assert versions == ["1", "2"]
    finally:
        stop_cleanly(server)


def test_a_management_port_serves_the_management_api_only_there(
    store: Path, tmp_path: Path
) -> None:
    repo = build_repository(store, tmp_path / "repo")
    server = start_server(repo, "--management-port", "0")
    try:
        (line,) = [ln for ln in server.lines if ln.startswith("management: ")]
        management = line.removeprefix("management: ")
        names = [m["modelName"] for m in httpx.get(f"{management}/models").json()["models"]]
        assert names == sorted(MODELS)
        assert httpx.get(f"{server.http_url}/models").status_code == 404
        assert httpx.post(f"{management}/predictions/echo", json={}).status_code == 404
        assert httpx.post(f"{server.http_url}/predictions/echo", json={}).status_code == 200
    finally:
        stop_cleanly(server)


def test_every_route_but_ping_needs_the_api_key(store: Path, tmp_path: Path) -> None:
    repo = build_repository(store, tmp_path / "repo")
    server = start_server(repo, "--enable-model-control", "--api-key", "sekrit")
    try:
        url, key = server.http_url, {"x-api-key": "sekrit"}
        assert httpx.get(f"{url}/ping").status_code == 200
        assert httpx.post(f"{url}/predictions/echo", json={}).status_code == 401
        assert httpx.get(f"{url}/models").status_code == 401
        assert httpx.post(f"{url}/predictions/echo", json={}, headers=key).status_code == 200
        assert httpx.get(f"{url}/models", headers=key).status_code == 200
    finally:
        stop_cleanly(server)
