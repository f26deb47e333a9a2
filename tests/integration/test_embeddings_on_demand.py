"""Embedding and rerank models that load on demand (``--load lazy``) are loaded by the first
request that names them, on every route that serves them (OpenAI, vLLM's rerank, Ollama), which
waits and is answered as a loaded model answers it."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import numpy as np
import pytest

from tests.integration.embedding_support import EMBEDDER, RERANKER, embedding_repo, st_vectors
from tests.serverproc import ServerProcess, served, start_server

TEXTS = ["the cat sat", "a dog ran far"]


@pytest.fixture
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    repo = embedding_repo(tmp_path_factory.mktemp("lazy_embed"))
    yield from served(start_server(repo, "--load", "lazy"))


def ready(client: httpx.Client, name: str) -> bool:
    return client.get(f"/v2/models/{name}/ready").status_code == 200


def test_each_route_loads_the_model_it_names(server: ServerProcess) -> None:
    with httpx.Client(base_url=server.http_url, timeout=120) as client:
        assert not ready(client, EMBEDDER)
        assert not ready(client, RERANKER)

        answer = client.post("/v1/embeddings", json={"model": EMBEDDER, "input": TEXTS})
        assert answer.status_code == 200, answer.text
        vectors = [row["embedding"] for row in answer.json()["data"]]
        assert np.allclose(vectors, st_vectors(TEXTS), atol=1e-4)
        assert ready(client, EMBEDDER)
        assert not ready(client, RERANKER)

        body = {"model": RERANKER, "query": "a cat", "documents": TEXTS}
        ranked = client.post("/v1/rerank", json=body)
        assert ranked.status_code == 200, ranked.text
        assert sorted(r["index"] for r in ranked.json()["results"]) == [0, 1]
        assert ready(client, RERANKER)

        client.post("/v2/repository/models/" + EMBEDDER + "/unload")
        ollama = client.post("/api/embed", json={"model": EMBEDDER, "input": TEXTS})
        assert ollama.status_code == 200, ollama.text
        assert len(ollama.json()["embeddings"]) == 2
