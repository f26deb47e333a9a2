"""Start-up, failing models, readiness, polling and draining, on a real server process."""

from __future__ import annotations

import shutil
import subprocess
import sys
import threading
from pathlib import Path

import httpx
import pytest

from tests.conftest import EXAMPLES, TEST_MODELS
from tests.integration.logs_support import wait_for_lines
from tests.serverproc import inflight, start_server, wait_for

SLOW_BODY = {"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [2], "data": [1, 2]}]}


def infer(url: str, model: str, body: dict[str, object], version: str = "") -> httpx.Response:
    path = f"/v2/models/{model}" + (f"/versions/{version}" if version else "") + "/infer"
    return httpx.post(url + path, json=body, timeout=30)


@pytest.fixture
def broken_repo(tmp_path: Path) -> Path:
    shutil.copytree(EXAMPLES / "text_python", tmp_path / "text_python")
    (tmp_path / "bad_file").mkdir()
    (tmp_path / "bad_file" / "model.yaml").write_text("runtime: onnx\n")
    (tmp_path / "bad_file" / "model.onnx").write_bytes(b"this is not an onnx graph")
    (tmp_path / "bad_yaml").mkdir()
    (tmp_path / "bad_yaml" / "model.yaml").write_text("runtime: [python\n")
    (tmp_path / "load_raises").mkdir()
    (tmp_path / "load_raises" / "model.yaml").write_text(
        "runtime: python\nclass: Boom\n"
        "inputs: [{name: X, datatype: FP32, shape: [-1]}]\n"
        "outputs: [{name: Y, datatype: FP32, shape: [-1]}]\n"
    )
    (tmp_path / "load_raises" / "model.py").write_text(
        "from rosettaserve import Model\n\n\nclass Boom(Model):\n"
        "    def load(self):\n        raise RuntimeError('weights corrupted')\n"
    )
    return tmp_path


def test_failed_models_are_not_ready_and_say_why(broken_repo: Path) -> None:
    server = start_server(broken_repo, wait_ready=False)
    try:
        url = server.http_url
        wait_for(lambda: any(line.startswith("http: ") for line in server.lines))
        assert httpx.get(url + "/v2/health/live").json() == {"live": True}
        ready = httpx.get(url + "/v2/health/ready")
        assert (ready.status_code, ready.json()) == (503, {"ready": False})
        reasons = {
            "bad_file": "INVALID_PROTOBUF",
            "bad_yaml": "model.yaml cannot be read",
            "load_raises": "RuntimeError: weights corrupted",
        }
        for model, reason in reasons.items():
            meta = httpx.get(f"{url}/v2/models/{model}").json()
            assert meta["properties"]["state"] == "UNAVAILABLE"
            assert reason in meta["properties"]["reason"]
            not_ready = httpx.get(f"{url}/v2/models/{model}/ready")
            assert not_ready.status_code == 503
            refused = infer(url, model, SLOW_BODY)
            assert refused.status_code == 503
            assert reason in refused.json()["error"]
            assert any(model in line and reason in line for line in server.lines)
        good = infer(
            url,
            "text_python",
            {"inputs": [{"name": "TEXT", "datatype": "BYTES", "shape": [1], "data": ["ok"]}]},
        )
        assert good.status_code == 200
        assert good.json()["outputs"][0]["data"] == ["OK"]
        summary = [line for line in server.lines if "versions:" in line]
        assert summary == ["4 models, 4 versions: 1 ready, 3 not ready (see above)"]
    finally:
        assert server.stop() == 0


def test_no_strict_readiness_reports_ready_despite_failures(broken_repo: Path) -> None:
    server = start_server(broken_repo, "--no-strict-readiness")
    try:
        assert httpx.get(server.http_url + "/v2/health/ready").status_code == 200
        assert httpx.get(server.http_url + "/v2/models/bad_yaml/ready").status_code == 503
    finally:
        assert server.stop() == 0


def test_startup_prints_one_line_per_model_then_summary_then_url(repo: Path) -> None:
    server = start_server(repo)
    try:
        lines = server.lines
        model_lines = [line for line in lines if line.startswith("  model ")]
        names = sorted(line.split()[1] for line in model_lines)
        on_disk = sorted(p.name for p in repo.iterdir() if p.is_dir())
        assert names == on_disk
        versioned = next(line for line in model_lines if "versioned_python" in line)
        assert "versions 1,2" in versioned
        assert "runtime python" in versioned
        assert "READY" in versioned
        summary = next(i for i, line in enumerate(lines) if "versions:" in line)
        url = next(i for i, line in enumerate(lines) if line.startswith("http: http://127.0.0.1:"))
        assert max(lines.index(line) for line in model_lines) < summary < url
    finally:
        assert server.stop() == 0


def test_sigterm_drains_in_flight_requests_then_exits_zero(tmp_path: Path) -> None:
    shutil.copytree(TEST_MODELS / "slow_python", tmp_path / "slow_python")
    server = start_server(tmp_path)
    result: list[httpx.Response] = []
    body = {**SLOW_BODY, "parameters": {"sleep": 1.0}}
    worker = threading.Thread(
        target=lambda: result.append(infer(server.http_url, "slow_python", body))
    )
    worker.start()
    wait_for(lambda: inflight(server, "slow_python") == 1)  # sent is not yet in the model
    assert server.stop() == 0
    worker.join()
    assert result[0].status_code == 200
    assert result[0].json()["outputs"][0]["data"] == [1.0, 2.0]
    wait_for_lines(server, lambda line: line == "rosettaserve stopped")  # the last of its output


def test_polling_adds_and_removes_versions_and_models(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    shutil.copytree(TEST_MODELS / "slow_python", repo / "slow")  # unversioned: version 1
    server = start_server(repo, "--poll-interval", "0.2")
    url = server.http_url
    try:
        # a new version folder appears: version 2 is served (latest: 1 drops version 1)
        (repo / "slow" / "2").mkdir()
        shutil.copy(repo / "slow" / "model.py", repo / "slow" / "2" / "model.py")
        wait_for(lambda: httpx.get(f"{url}/v2/models/slow").json()["versions"] == ["2"])
        assert infer(url, "slow", SLOW_BODY).json()["model_version"] == "2"

        # a new model appears
        shutil.copytree(EXAMPLES / "text_python", repo / "text")
        wait_for(lambda: httpx.get(f"{url}/v2/models/text/ready").status_code == 200)

        # a model is removed while a request is in flight: the request still succeeds
        result: list[httpx.Response] = []
        body = {**SLOW_BODY, "parameters": {"sleep": 1.0}}
        worker = threading.Thread(target=lambda: result.append(infer(url, "slow", body)))
        worker.start()
        wait_for(lambda: inflight(server, "slow", "2") == 1)
        shutil.rmtree(repo / "slow")
        wait_for(lambda: httpx.get(f"{url}/v2/models/slow").status_code == 404)
        worker.join()
        assert result[0].status_code == 200
        assert result[0].json()["outputs"][0]["data"] == [1.0, 2.0]
        assert httpx.get(f"{url}/v2/health/ready").status_code == 200
    finally:
        assert server.stop() == 0


def test_polling_reloads_a_model_whose_yaml_changed(tmp_path: Path) -> None:
    shutil.copytree(EXAMPLES / "versioned_python", tmp_path / "scaled")
    server = start_server(tmp_path, "--poll-interval", "0.2")
    url = server.http_url
    body = {"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1, 1], "data": [3]}]}
    try:
        assert infer(url, "scaled", body, "2").json()["outputs"][0]["data"] == [6.0]
        config = tmp_path / "scaled" / "model.yaml"
        config.write_text(config.read_text().replace("factor: 2.0", "factor: 10.0"))
        wait_for(lambda: infer(url, "scaled", body, "2").json()["outputs"][0]["data"] == [30.0])
    finally:
        assert server.stop() == 0


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--help"], ["serve", "--version"]),
        (
            ["serve", "--help"],
            [
                "--host",
                "--http-port",
                "--max-request-size",
                "--poll-interval",
                "--no-strict-readiness",
                "--log-level",
            ],
        ),
    ],
)
def test_help_explains_every_option(args: list[str], expected: list[str]) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "rosettaserve", *args], capture_output=True, text=True, check=True
    ).stdout
    for option in expected:
        assert option in out


def test_missing_repository_is_a_clear_error(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "rosettaserve", "serve", str(tmp_path / "nope")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 2
    assert "is not a folder" in done.stderr
