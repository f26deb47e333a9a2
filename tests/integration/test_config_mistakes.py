"""A mistake in one model's model.yaml, or a runtime whose package is not installed, fails that
model's load with a message naming the mistake (the model's reason, its start-up line), while
the other models serve."""

from __future__ import annotations

import shutil
from pathlib import Path

import httpx
import pytest

from tests.conftest import EXAMPLES
from tests.serverproc import ServerProcess, start_server, stop_cleanly, wait_for

GOOD = "text_python"
MISTAKES = {
    "typo": ("max_batch_sise: 8\n", "unknown key max_batch_sise: did you mean max_batch_size?"),
    "quoted": ('max_batch_size: "8"\n', "max_batch_size: expected an integer >= 0, got '8'"),
    "policy": (
        "version_policy: {latest: 0}\n",
        "version_policy.latest: expected an integer >= 1, got 0",
    ),
    "choice": ("isolation: proces\n", "isolation: 'proces' is not one of thread, process: did"),
}
ONNX_TYPO = "unknown key parameters.intra_op_thread: did you mean parameters.intra_op_threads?"
TEXT_BODY = {"inputs": [{"name": "TEXT", "datatype": "BYTES", "shape": [1], "data": ["abc"]}]}
BLOCKER = """\
import importlib.abc, os, sys

BLOCKED = set(os.environ["ROSETTASERVE_TEST_BLOCK"].split(","))


class Blocker(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in BLOCKED:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


sys.meta_path.insert(0, Blocker())
"""


def started(repo: Path) -> ServerProcess:
    server = start_server(repo, wait_ready=False)
    wait_for(lambda: any("models," in line and "versions:" in line for line in server.lines))
    return server


def assert_failed(server: ServerProcess, model: str, message: str) -> None:
    meta = httpx.get(f"{server.http_url}/v2/models/{model}", timeout=10).json()
    assert meta["properties"]["state"] == "UNAVAILABLE"
    assert message in meta["properties"]["reason"]
    ready = httpx.get(f"{server.http_url}/v2/models/{model}/ready", timeout=10)
    assert ready.status_code == 503
    assert any(f"model {model} " in line and message in line for line in server.lines), "\n".join(
        server.lines
    )


def assert_serves(server: ServerProcess, model: str) -> None:
    answer = httpx.post(f"{server.http_url}/v2/models/{model}/infer", json=TEXT_BODY, timeout=30)
    assert answer.status_code == 200, answer.text
    assert answer.json()["outputs"][0]["data"] == ["ABC"]


def test_a_mistake_in_model_yaml_fails_that_model_only(tmp_path: Path) -> None:
    shutil.copytree(EXAMPLES / GOOD, tmp_path / GOOD)
    for name, (line, _) in MISTAKES.items():
        shutil.copytree(EXAMPLES / GOOD, tmp_path / name)
        with (tmp_path / name / "model.yaml").open("a") as f:
            f.write(line)
    shutil.copytree(EXAMPLES / "mlp_onnx", tmp_path / "onnx_typo")
    with (tmp_path / "onnx_typo" / "model.yaml").open("a") as f:
        f.write("parameters: {intra_op_thread: 1}\n")
    server = started(tmp_path)
    try:
        for name, (_, message) in MISTAKES.items():
            assert_failed(server, name, message)
        assert_failed(server, "onnx_typo", ONNX_TYPO)
        assert_serves(server, GOOD)
    finally:
        stop_cleanly(server)


def test_a_runtime_without_its_package_names_the_extra(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No runtime's package can be imported in the server (their imports are made to fail), as
    in an install without extras: the ONNX model says which extra installs its runtime, and the
    python model serves."""
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "sitecustomize.py").write_text(BLOCKER)
    monkeypatch.setenv("PYTHONPATH", str(tmp_path / "site"))
    monkeypatch.setenv("ROSETTASERVE_TEST_BLOCK", "onnxruntime,sklearn,joblib,torch,transformers")
    repo = tmp_path / "repo"
    shutil.copytree(EXAMPLES / GOOD, repo / GOOD)
    shutil.copytree(EXAMPLES / "mlp_onnx", repo / "mlp_onnx")
    (repo / "tiny_vllm").mkdir()  # vLLM lives in a venv of its own (.venv-vllm), never this one
    (repo / "tiny_vllm" / "model.yaml").write_text("runtime: vllm\n")
    server = started(repo)
    try:
        assert_failed(
            server,
            "mlp_onnx",
            "runtime onnx needs the Python package 'onnxruntime', which is not installed: "
            "pip install 'rosettaserve[onnx]'",
        )
        assert_failed(
            server,
            "tiny_vllm",
            "runtime vllm needs the Python package 'vllm', which is not installed: "
            "pip install 'rosettaserve[vllm]'",
        )
        assert_serves(server, GOOD)
    finally:
        stop_cleanly(server)
