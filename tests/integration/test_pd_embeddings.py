"""Embeddings and rerank through ``rosettaserve scheduler``: no prefill/decode split, each
request forwarded whole to an instance (of either role) that has its model, with the answers
and the error replies a single server gives."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest

from tests.integration.embedding_support import (
    EMBEDDER,
    QUERY,
    RERANKER,
    TEXTS,
    close,
    embedding_repo,
    st_scores,
    st_vectors,
)
from tests.pdproc import instances, start_instance, start_scheduler
from tests.serverproc import ServerProcess, stop_cleanly


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return embedding_repo(tmp_path_factory.mktemp("pd_embed_repo"))


@pytest.fixture(scope="module")
def cluster(repo: Path) -> Iterator[dict[str, ServerProcess]]:
    p = start_instance(repo, "prefill")
    d = start_instance(repo, "decode")
    s = start_scheduler([p], [d])
    yield {"prefill": p, "decode": d, "scheduler": s}
    for proc in (s, p, d):
        stop_cleanly(proc)


@pytest.fixture(scope="module")
def pd(cluster: dict[str, ServerProcess]) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=cluster["scheduler"].http_url, timeout=60) as client:
        yield client


def test_every_route_through_the_scheduler(
    cluster: dict[str, ServerProcess], pd: httpx.Client
) -> None:
    sdk = openai.OpenAI(
        base_url=cluster["scheduler"].http_url + "/v1", api_key="unused", max_retries=0
    )
    want = st_vectors(TEXTS)
    close([d.embedding for d in sdk.embeddings.create(model=EMBEDDER, input=TEXTS).data], want)
    close(pd.post("/embed", json={"inputs": TEXTS}).json(), want)
    scores = st_scores(QUERY, TEXTS)
    tei = pd.post("/rerank", json={"query": QUERY, "texts": TEXTS}).json()
    close([a["score"] for a in sorted(tei, key=lambda a: a["index"])], scores)
    body = {"model": RERANKER, "query": QUERY, "documents": TEXTS}
    results = pd.post("/v1/rerank", json=body).json()["results"]
    close([r["relevance_score"] for r in sorted(results, key=lambda r: r["index"])], scores)
    assert {m.id for m in sdk.models.list()} == {EMBEDDER, RERANKER}
    assert instances(cluster["scheduler"])["stats"]["whole"] >= 4


def test_errors_come_back_in_each_routes_shape(pd: httpx.Client) -> None:
    r = pd.post("/v1/embeddings", json={"model": EMBEDDER, "input": []})
    assert r.status_code == 400
    assert "no text" in r.json()["error"]["message"]
    r = pd.post("/embed", json={"inputs": ["a"] * 65})
    assert r.status_code == 400
    assert r.json()["error_type"] == "Validation"
    r = pd.post("/v1/embeddings", json={"model": "absent", "input": "a"})
    assert r.status_code == 404
    assert r.json()["error"]["code"] == "model_not_found"
