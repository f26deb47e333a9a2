"""Ollama's API through a scheduler, a prefill and a decode instance (real processes on
loopback), against a mixed instance: chat and generate split as the other families are (the
same greedy text, streamed and not, with the ollama client), embeddings and the model routes
forwarded whole."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import ollama
import pytest

from tests.conftest import EXAMPLES
from tests.pdproc import llm_repo, start_instance, start_scheduler, status
from tests.serverproc import ServerProcess, served, start_server, stop_cleanly

MODEL, EMBEDDER = "tiny_llama", "tiny_embedder"
STORY = [{"role": "user", "content": "Tell me a story."}]
GREEDY = {"temperature": 0, "num_predict": 20}


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    dest = llm_repo(tmp_path_factory.mktemp("pd_ollama_repo"))
    shutil.copytree(EXAMPLES / EMBEDDER, dest / EMBEDDER)
    return dest


@pytest.fixture(scope="module")
def mixed(repo: Path) -> Iterator[ServerProcess]:
    yield from served(start_server(repo))


@pytest.fixture(scope="module")
def cluster(repo: Path) -> Iterator[dict[str, ServerProcess]]:
    p = start_instance(repo, "prefill")
    d = start_instance(repo, "decode")
    s = start_scheduler([p], [d], "--policy", "round-robin")
    yield {"prefill": p, "decode": d, "scheduler": s}
    for proc in (s, p, d):
        stop_cleanly(proc)


def both(cluster: dict[str, ServerProcess], mixed: ServerProcess) -> tuple[Any, Any]:
    return ollama.Client(host=cluster["scheduler"].http_url), ollama.Client(host=mixed.http_url)


def test_chat_and_generate_are_split_and_answer_as_a_mixed_instance(
    cluster: dict[str, ServerProcess], mixed: ServerProcess
) -> None:
    via, ref = both(cluster, mixed)
    before = status(cluster["decode"])["decode"]["finished"]
    want = ref.chat(model=MODEL, messages=STORY, options=GREEDY).message.content
    assert want
    assert via.chat(model=MODEL, messages=STORY, options=GREEDY).message.content == want
    parts = list(via.chat(model=f"{MODEL}:latest", messages=STORY, options=GREEDY, stream=True))
    assert "".join(p.message.content or "" for p in parts) == want
    assert parts[-1].done
    text = ref.generate(model=MODEL, prompt="Once upon", options=GREEDY).response
    assert via.generate(model=MODEL, prompt="Once upon", options=GREEDY).response == text
    pieces = via.generate(model=MODEL, prompt="Once upon", options=GREEDY, stream=True)
    assert "".join(p.response or "" for p in pieces) == text
    assert status(cluster["decode"])["decode"]["finished"] == before + 4


def test_embeddings_and_model_routes_are_forwarded_whole(
    cluster: dict[str, ServerProcess], mixed: ServerProcess
) -> None:
    via, ref = both(cluster, mixed)
    texts = ["hello world", "x"]
    assert via.embed(model=EMBEDDER, input=texts).embeddings == (
        ref.embed(model=EMBEDDER, input=texts).embeddings
    )
    assert via.embeddings(model=EMBEDDER, prompt="x").embedding == (
        ref.embeddings(model=EMBEDDER, prompt="x").embedding
    )
    assert {m.model for m in via.list().models} == {f"{MODEL}:latest", f"{EMBEDDER}:latest"}
    assert via.show(MODEL).capabilities == ["completion"]
    with pytest.raises(ollama.ResponseError) as missing:
        via.chat(model="nope", messages=STORY)
    assert missing.value.status_code == 404
