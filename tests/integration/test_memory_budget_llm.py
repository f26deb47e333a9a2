"""An LLM that loads on demand: its first chat loads it (the request waits), Ollama's /api/ps
shows the memory it holds, ``keep_alive: 0`` unloads it once the request is answered, and the
next chat loads it again."""

from __future__ import annotations

import shutil
from pathlib import Path

import ollama
import tritonclient.http as triton

from tests.conftest import EXAMPLES
from tests.serverproc import ServerProcess, start_server, wait_for

LLM = "tiny_llama"
HELLO = [{"role": "user", "content": "Hello"}]
SHORT = {"temperature": 0, "num_predict": 4}


def state(server: ServerProcess) -> tuple[str, str, int]:
    client = triton.InferenceServerClient(server.http_hostport)
    row = next(r for r in client.get_model_repository_index() if r["name"] == LLM)
    return row["state"], row["reason"], row["resident_bytes"]


def loaded_on_demand(server: ServerProcess) -> int:
    return sum(f"loaded model {LLM} version 1 on demand" in line for line in server.lines)


def test_a_lazy_llm_loads_on_its_first_chat_and_keep_alive_0_unloads_it(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    shutil.copytree(EXAMPLES / LLM, repo / LLM)
    with (repo / LLM / "model.yaml").open("a") as f:
        f.write("load: lazy\n")
    proc = start_server(repo, "--enable-model-control")
    try:
        assert state(proc) == ("UNLOADED", "lazy", 0)
        client = ollama.Client(host=proc.http_url)
        assert client.chat(model=LLM, messages=HELLO, options=SHORT).message.content
        assert state(proc)[0] == "READY"
        assert state(proc)[2] > 0
        assert [m.size for m in client.ps().models] == [state(proc)[2]]

        assert client.chat(model=LLM, messages=HELLO, options=SHORT, keep_alive=0).message.content
        wait_for(lambda: state(proc)[:2] == ("UNLOADED", "idle"), timeout=60)
        assert client.ps().models == []
        assert client.chat(model=LLM, messages=HELLO, options=SHORT).message.content
        assert loaded_on_demand(proc) == 2
    finally:
        proc.stop()
