"""runtime: embedding through every route, with the clients people use: the vectors equal
sentence-transformers' ``encode`` on the same folder and the rerank scores its
``CrossEncoder.predict``, alone and under 64 concurrent requests (batched together); errors in
each route's own shape, refused before the model runs."""

from __future__ import annotations

import asyncio
import base64
from collections.abc import Iterator

import httpx
import numpy as np
import openai
import pytest
import tritonclient.http as httpclient

from tests.integration.embedding_support import (
    EMBEDDER,
    QUERY,
    RERANKER,
    TEXTS,
    close,
    cross_encoder,
    embedding_repo,
    sentence_transformer,
    st_scores,
    st_tokens,
    st_vectors,
)
from tests.serverproc import ServerProcess, served, start_server


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    yield from served(start_server(embedding_repo(tmp_path_factory.mktemp("embed_repo"))))


@pytest.fixture(scope="module")
def http(server: ServerProcess) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.http_url, timeout=60) as client:
        yield client


@pytest.fixture(scope="module")
def sdk(server: ServerProcess) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.http_url + "/v1", api_key="unused", max_retries=0)


def test_openai_sdk_base64_and_float(sdk: openai.OpenAI) -> None:
    want = st_vectors(TEXTS)
    # unasked, the SDK asks for base64 and decodes it
    for fmt in ({}, {"encoding_format": "float"}):
        answer = sdk.embeddings.create(model=EMBEDDER, input=TEXTS, **fmt)  # type: ignore[arg-type]
        assert [d.index for d in answer.data] == list(range(len(TEXTS)))
        close([d.embedding for d in answer.data], want)
        assert answer.usage.prompt_tokens == answer.usage.total_tokens == st_tokens(TEXTS)
        assert answer.model == EMBEDDER
    one = sdk.embeddings.create(model=EMBEDDER, input=TEXTS[0])
    close([one.data[0].embedding], want[:1])


def test_base64_is_the_float_answer(http: httpx.Client) -> None:
    body = {"model": EMBEDDER, "input": TEXTS}
    floats = http.post("/v1/embeddings", json=body).json()["data"]
    coded = http.post("/v1/embeddings", json=body | {"encoding_format": "base64"}).json()["data"]
    for f, c in zip(floats, coded, strict=True):
        decoded = np.frombuffer(base64.b64decode(c["embedding"]), dtype="<f4")
        assert decoded.tolist() == np.asarray(f["embedding"], dtype=np.float32).tolist()


def test_token_ids_are_the_text_they_encode(sdk: openai.OpenAI) -> None:
    tokenizer = sentence_transformer().tokenizer
    ids = [tokenizer(t)["input_ids"] for t in (TEXTS[0], TEXTS[4])]
    one = sdk.embeddings.create(model=EMBEDDER, input=ids[0], encoding_format="float")
    close([one.data[0].embedding], st_vectors([TEXTS[0]]))
    both = sdk.embeddings.create(model=EMBEDDER, input=ids, encoding_format="float")
    close([d.embedding for d in both.data], st_vectors([TEXTS[0], TEXTS[4]]))
    assert both.usage.prompt_tokens == sum(map(len, ids))


def test_dimensions_cut_a_matryoshka_vector(sdk: openai.OpenAI) -> None:
    full = st_vectors(TEXTS)[:, :16]
    want = full / np.linalg.norm(full, axis=1, keepdims=True)
    answer = sdk.embeddings.create(model=EMBEDDER, input=TEXTS, dimensions=16)
    close([d.embedding for d in answer.data], want)
    with pytest.raises(openai.BadRequestError, match="one of \\[16, 32, 64\\]"):
        sdk.embeddings.create(model=EMBEDDER, input=TEXTS, dimensions=20)


def test_tei_embed(http: httpx.Client) -> None:
    want = st_vectors(TEXTS)
    close(http.post("/embed", json={"inputs": TEXTS}).json(), want)
    close(http.post("/embed", json={"inputs": TEXTS[1], "truncate": True}).json(), want[1:2])
    raw = np.asarray(http.post("/embed", json={"inputs": TEXTS, "normalize": False}).json())
    assert not np.allclose(np.linalg.norm(raw, axis=1), 1.0)  # the pooled vectors as they are
    close(raw / np.linalg.norm(raw, axis=1, keepdims=True), want)


def test_tei_rerank(http: httpx.Client) -> None:
    want, raw = st_scores(QUERY, TEXTS), st_scores(QUERY, TEXTS, raw=True)
    order = [int(i) for i in np.argsort(-want, kind="stable")]
    body = {"query": QUERY, "texts": TEXTS, "return_text": True}
    answer = http.post("/rerank", json=body).json()
    assert [a["index"] for a in answer] == order
    assert [a["text"] for a in answer] == [TEXTS[i] for i in order]
    close([a["score"] for a in answer], want[order])
    answer = http.post("/rerank", json={"query": QUERY, "texts": TEXTS, "raw_scores": True}).json()
    assert "text" not in answer[0]
    close([a["score"] for a in answer], raw[order])


def test_v1_rerank(http: httpx.Client) -> None:
    want = st_scores(QUERY, TEXTS)
    order = [int(i) for i in np.argsort(-want, kind="stable")]
    body = {"model": RERANKER, "query": QUERY, "documents": TEXTS, "top_n": 3}
    answer = http.post("/v1/rerank", json=body).json()
    assert [r["index"] for r in answer["results"]] == order[:3]
    assert [r["document"]["text"] for r in answer["results"]] == [TEXTS[i] for i in order[:3]]
    close([r["relevance_score"] for r in answer["results"]], want[order[:3]])
    assert answer["model"] == RERANKER
    pairs = cross_encoder().tokenizer([QUERY] * len(TEXTS), TEXTS, truncation=True)
    assert answer["usage"]["prompt_tokens"] == sum(len(ids) for ids in pairs["input_ids"])
    objects = [{"text": t} for t in TEXTS]
    bare = http.post("/v1/rerank", json={"query": QUERY, "documents": objects,
                                         "return_documents": False}).json()  # fmt: skip
    assert [r["index"] for r in bare["results"]] == order
    assert "document" not in bare["results"][0]


def test_oip_tritonclient(server: ServerProcess) -> None:
    client = httpclient.InferenceServerClient(server.http_hostport)
    text = httpclient.InferInput("TEXT", [len(TEXTS)], "BYTES")
    text.set_data_from_numpy(np.array([t.encode() for t in TEXTS], dtype=object))
    result = client.infer(EMBEDDER, [text])
    close(result.as_numpy("EMBEDDING"), st_vectors(TEXTS))
    query = httpclient.InferInput("QUERY", [len(TEXTS)], "BYTES")
    query.set_data_from_numpy(np.array([QUERY.encode()] * len(TEXTS), dtype=object))
    scored = client.infer(RERANKER, [query, text])
    close(scored.as_numpy("SCORE"), st_scores(QUERY, TEXTS))


def test_oip_text_that_is_not_utf8_is_replaced_not_refused(server: ServerProcess) -> None:
    client = httpclient.InferenceServerClient(server.http_hostport)
    text = httpclient.InferInput("TEXT", [2], "BYTES")
    text.set_data_from_numpy(np.array([b"caf\xe9 ok", "café ok".encode()], dtype=object))
    got = client.infer(EMBEDDER, [text]).as_numpy("EMBEDDING")
    close(got, st_vectors(["caf\ufffd ok", "café ok"]))


def test_models_lists_embedding_models(sdk: openai.OpenAI) -> None:
    assert {m.id for m in sdk.models.list()} == {EMBEDDER, RERANKER}


def test_64_concurrent_requests_each_get_their_own_answer(server: ServerProcess) -> None:
    texts = [f"request {i}: " + " ".join(TEXTS[: 1 + i % len(TEXTS)]) for i in range(64)]
    want = st_vectors(texts)

    async def run() -> list[list[float]]:
        async with httpx.AsyncClient(base_url=server.http_url, timeout=120) as client:

            async def one(text: str) -> list[float]:
                r = await client.post("/v1/embeddings", json={"model": EMBEDDER, "input": text})
                assert r.status_code == 200, r.text
                return list(r.json()["data"][0]["embedding"])

            return list(await asyncio.gather(*(one(t) for t in texts)))

    close(asyncio.run(run()), want)


def test_langchain_openai_embeddings(server: ServerProcess) -> None:
    from langchain_openai import OpenAIEmbeddings

    client = OpenAIEmbeddings(
        model=EMBEDDER,
        base_url=server.http_url + "/v1",
        api_key="unused",  # type: ignore[arg-type]
        check_embedding_ctx_length=False,  # send the texts, not tiktoken's token ids
        tiktoken_enabled=False,
    )
    close(client.embed_documents(TEXTS), st_vectors(TEXTS))
    close([client.embed_query(TEXTS[3])], st_vectors([TEXTS[3]]))


OPENAI_ERRORS = [
    ({"model": EMBEDDER, "input": TEXTS, "encoding_format": "int8"}, "encoding_format"),
    ({"model": EMBEDDER}, "'input' is required"),
    ({"model": EMBEDDER, "input": []}, "no text"),
    ({"model": EMBEDDER, "input": ["a", 3]}, "not a mix"),
    ({"model": EMBEDDER, "input": ["a"] * 65}, "at most 64"),
    ({"model": EMBEDDER, "input": [[1, 2], [600]]}, "vocabulary"),
    ({"model": EMBEDDER, "input": list(range(1, 66))}, "more than this model reads"),
    ({"model": RERANKER, "input": "a"}, "not an embedding model"),
    ({"model": EMBEDDER, "input": ["a", "b" * 16385]}, "at most 16384 characters"),
]


@pytest.mark.parametrize(("body", "message"), OPENAI_ERRORS)
def test_openai_errors(http: httpx.Client, body: dict[str, object], message: str) -> None:
    r = http.post("/v1/embeddings", json=body)
    assert r.status_code == 400
    error = r.json()["error"]
    assert message in error["message"]
    assert error["type"] == "invalid_request_error"


def test_unknown_model_is_openais_404(http: httpx.Client) -> None:
    r = http.post("/v1/embeddings", json={"model": "nope", "input": "a"})
    assert r.status_code == 404
    assert r.json()["error"]["code"] == "model_not_found"


TEI_ERRORS = [
    ("/embed", {"inputs": []}, "no text"),
    ("/embed", {"inputs": ["a"] * 65}, "at most 64"),
    ("/embed", {"inputs": 3}, "string or a list"),
    ("/rerank", {"texts": ["a"]}, "'query' is required"),
    ("/rerank", {"query": "q", "texts": ["a"] * 65}, "at most 64"),
    ("/rerank", {"query": "q", "texts": ["a"], "model": EMBEDDER}, "not a rerank model"),
    ("/rerank", {"query": "q" * 20000, "texts": ["a"]}, "characters"),
]


@pytest.mark.parametrize(("path", "body", "message"), TEI_ERRORS)
def test_tei_errors(http: httpx.Client, path: str, body: dict[str, object], message: str) -> None:
    r = http.post(path, json=body)
    assert r.status_code == 400
    assert message in r.json()["error"]
    assert r.json()["error_type"] == "Validation"


def test_v1_rerank_errors(http: httpx.Client) -> None:
    r = http.post("/v1/rerank", json={"query": "q", "documents": []})
    assert r.status_code == 400
    assert "no text" in r.json()["error"]["message"]
    r = http.post("/v1/rerank", json={"query": "q", "documents": ["a"], "top_n": -1})
    assert r.status_code == 400
    assert "top_n" in r.json()["error"]["message"]


def test_requests_are_in_the_metrics(http: httpx.Client) -> None:
    http.post("/embed", json={"inputs": "counted"}).raise_for_status()
    text = http.get("/metrics").text
    lines = [line for line in text.splitlines() if EMBEDDER in line and 'protocol="tei"' in line]
    assert lines, "no metric line of the tei protocol for the embedder"
