"""``runtime: vllm`` tests run in their own pytest process, from .venv-vllm (``make test``):
``.venv-vllm/bin/python -m pytest -q tests_vllm``.

vLLM brings transformers 5 and the ``llm`` extra pins 4.57, so vLLM has a venv of its own. The
model is the head-size-32 tiny Llama (build_model.py; vLLM's CPU attention needs 32 or more),
served two ways, each started once for the whole run: by rosettaserve with ``runtime: vllm``
and by vLLM's own OpenAI server (``python -m vllm.entrypoints.openai.api_server``), the
reference for greedy output. vLLM takes about 30 s to start.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests import serverproc
from tests.serverproc import ServerProcess, served, start_server
from tests_vllm.build_model import DEFAULT_OUT, build

MODEL = "tiny_llama"
START_TIMEOUT_S = 300.0  # vLLM's engine start, on a busy machine
KV_CACHE_BYTES = 256 << 20
MODEL_YAML = f"""\
runtime: vllm
parameters:
  max_num_seqs: 8
  max_waiting: 8
  kv_cache_memory_bytes: {KV_CACHE_BYTES}
"""


def model_folder(
    repo: Path, name: str = MODEL, model_yaml: str = MODEL_YAML, source: Path | None = None
) -> Path:
    """``repo/name``: the built model's files (linked) with its own model.yaml."""
    source = source or build(DEFAULT_OUT)
    folder = repo / name
    folder.mkdir(parents=True)
    for path in source.iterdir():
        if path.name != "model.yaml":
            (folder / path.name).symlink_to(path)
    (folder / "model.yaml").write_text(model_yaml)
    return folder


@pytest.fixture(scope="session")
def rosetta(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """rosettaserve serving the model with ``runtime: vllm``."""
    repo = tmp_path_factory.mktemp("vllm_repo")
    model_folder(repo)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(serverproc, "START_TIMEOUT_S", START_TIMEOUT_S)
        server = start_server(repo)
    yield from served(server)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="session")
def vllm_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """vLLM's own OpenAI server on the same model and engine settings."""
    yield from vllm_server(build(DEFAULT_OUT), tmp_path_factory.mktemp("vllm_server"))


def vllm_server(model: Path, logs: Path, *args: str) -> Iterator[str]:
    """vLLM's own OpenAI server on ``model`` (``args``: more of its flags), until closed."""
    port = free_port()
    log = logs / "server.log"
    cmd = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model",
           str(model), "--served-model-name", MODEL, "--host", "127.0.0.1",
           "--port", str(port), "--dtype", "float32", "--max-num-seqs", "8",
           "--kv-cache-memory-bytes", str(KV_CACHE_BYTES), *args]  # fmt: skip
    with log.open("w") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(proc, url, log)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def wait_healthy(proc: subprocess.Popen[bytes], url: str, log: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            with urllib.request.urlopen(url + "/health", timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(0.5)
    proc.kill()
    proc.wait()
    pytest.fail(f"vLLM's server did not start:\n{log.read_text()[-3000:]}")


@pytest.fixture(scope="session")
def http(rosetta: ServerProcess) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=rosetta.http_url, timeout=120) as client:
        yield client


@pytest.fixture(scope="session")
def vllm_http(vllm_url: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=vllm_url, timeout=120) as client:
        yield client
