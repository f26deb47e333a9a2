"""``runtime: vllm`` with ``task: embed`` and ``task: rerank`` (vLLM's pooling runner) on the
embedding and rerank routes: the same vectors and scores as ``runtime: embedding`` on the same
folders (which the main suite holds to sentence-transformers' ``encode`` and
``CrossEncoder.predict``), through OpenAI's, TEI's, vLLM's and OIP's routes.

The folders are the example embedder and reranker built with 2 attention heads (head size 32,
which vLLM's CPU attention needs; the examples' is 16)."""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import httpx
import numpy as np
import pytest

from tests import serverproc
from tests.serverproc import ServerProcess, served, start_server
from tests_vllm.conftest import START_TIMEOUT_S

ROOT = Path(__file__).resolve().parent.parent
TEXTS = ["hello world", "The cat sat on the mat. " * 30, "émoji ☃ and ünïcode", "x"]
VLLM_YAML = """\
runtime: vllm
max_batch_size: 16
dynamic_batching: true
parameters:
  task: embed
  kv_cache_memory_bytes: 67108864
"""
HF_YAML = "runtime: embedding\nmax_batch_size: 16\nparameters: {threads: 1}\n"
RERANK_YAMLS = (
    VLLM_YAML.replace("task: embed", "task: rerank"),
    HF_YAML.replace("threads: 1", "threads: 1, task: rerank"),
)
QUERY = "where does the cat sit"


def builder() -> ModuleType:
    path = ROOT / "examples" / "build_embedding.py"
    spec = importlib.util.spec_from_file_location("build_embedding", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    build = builder()
    built = tmp_path_factory.mktemp("bert_h32")
    build.main(built, heads=2)
    repo = tmp_path_factory.mktemp("vllm_embed_repo")
    models = [("bert_vllm", VLLM_YAML, "tiny_embedder"), ("bert_hf", HF_YAML, "tiny_embedder")]
    models += [("rerank_vllm", RERANK_YAMLS[0], "tiny_reranker")]
    models += [("rerank_hf", RERANK_YAMLS[1], "tiny_reranker")]
    for name, yaml, source in models:
        folder = repo / name
        folder.mkdir()
        for path in (built / source).iterdir():
            if path.name != "model.yaml":
                (folder / path.name).symlink_to(path)
        (folder / "model.yaml").write_text(yaml)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(serverproc, "START_TIMEOUT_S", START_TIMEOUT_S)
        started = start_server(repo)
    yield from served(started)


@pytest.fixture(scope="module")
def http(server: ServerProcess) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.http_url, timeout=120) as client:
        yield client


def vectors(http: httpx.Client, model: str, **extra: object) -> np.ndarray:
    answer = http.post("/v1/embeddings", json={"model": model, "input": TEXTS, **extra})
    assert answer.status_code == 200, answer.text
    return np.array([d["embedding"] for d in answer.json()["data"]], dtype=np.float32)


def test_vllm_vectors_are_the_transformers_ones(http: httpx.Client) -> None:
    np.testing.assert_allclose(
        vectors(http, "bert_vllm"), vectors(http, "bert_hf"), rtol=1e-5, atol=1e-6
    )
    np.testing.assert_allclose(
        vectors(http, "bert_vllm", dimensions=16),
        vectors(http, "bert_hf", dimensions=16),
        rtol=1e-5,
        atol=1e-6,
    )


def test_usage_and_the_other_routes(http: httpx.Client) -> None:
    body = {"input": TEXTS}
    usage = [
        http.post("/v1/embeddings", json=body | {"model": m}).json()["usage"]
        for m in ("bert_vllm", "bert_hf")
    ]
    assert usage[0] == usage[1]
    tei = np.asarray(http.post("/embed", json={"inputs": TEXTS, "model": "bert_vllm"}).json())
    np.testing.assert_allclose(tei, vectors(http, "bert_hf"), rtol=1e-5, atol=1e-6)
    oip = {"inputs": [{"name": "TEXT", "datatype": "BYTES", "shape": [1], "data": [TEXTS[0]]}]}
    out = http.post("/v2/models/bert_vllm/infer", json=oip).json()["outputs"]
    embedding = next(o for o in out if o["name"] == "EMBEDDING")
    assert embedding["shape"] == [1, 64]
    np.testing.assert_allclose(embedding["data"], vectors(http, "bert_hf")[0], rtol=1e-5, atol=1e-6)


def test_a_pooling_model_is_no_text_generator(http: httpx.Client) -> None:
    answer = http.post("/v1/completions", json={"model": "bert_vllm", "prompt": "hi"})
    assert answer.status_code == 400
    assert "not a text generation model" in answer.json()["error"]["message"]
    models = {m["id"] for m in http.get("/v1/models").json()["data"]}
    assert models == {"bert_vllm", "bert_hf", "rerank_vllm", "rerank_hf"}


def test_vllm_rerank_scores_are_the_transformers_ones(http: httpx.Client) -> None:
    def scores(model: str, **extra: object) -> list[float]:
        body = {"model": model, "query": QUERY, "texts": TEXTS, **extra}
        answer = http.post("/rerank", json=body)
        assert answer.status_code == 200, answer.text
        return [a["score"] for a in sorted(answer.json(), key=lambda a: a["index"])]

    for extra in ({}, {"raw_scores": True}):
        np.testing.assert_allclose(
            scores("rerank_vllm", **extra), scores("rerank_hf", **extra), rtol=1e-5, atol=1e-6
        )
    body = {"query": QUERY, "documents": TEXTS, "top_n": 2}
    both = [http.post("/v1/rerank", json=body | {"model": m}).json() for m in ("rerank_vllm",
            "rerank_hf")]  # fmt: skip
    assert [r["index"] for r in both[0]["results"]] == [r["index"] for r in both[1]["results"]]
    assert both[0]["usage"] == both[1]["usage"]
