"""The tiny example embedder and reranker (examples/build_embedding.py, built by make), the
texts the tests send, and what sentence-transformers itself answers on the same folders."""

from __future__ import annotations

import shutil
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

from tests.conftest import EXAMPLES

EMBEDDER, RERANKER = "tiny_embedder", "tiny_reranker"
TEXTS = [
    "hello world",
    "The cat sat on the mat by the door. " * 30,  # past the embedder's 64 tokens: cut
    "x",
    "émoji ☃ and ünïcode",
    "Rivers run to the sea, and the sea is never full.",
]
QUERY = "where does the river run"


def embedding_repo(dest: Path) -> Path:
    """A repository holding only the two example models."""
    for name in (EMBEDDER, RERANKER):
        shutil.copytree(EXAMPLES / name, dest / name)
    return dest


@cache
def sentence_transformer() -> Any:
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(EXAMPLES / EMBEDDER), device="cpu")


@cache
def cross_encoder() -> Any:
    from sentence_transformers import CrossEncoder

    return CrossEncoder(str(EXAMPLES / RERANKER), device="cpu")


def st_vectors(texts: list[str]) -> np.ndarray:
    out: np.ndarray = sentence_transformer().encode(texts, convert_to_numpy=True)
    return out


def st_scores(query: str, texts: list[str], raw: bool = False) -> np.ndarray:
    import torch

    pairs = [(query, t) for t in texts]
    if raw:
        return np.asarray(cross_encoder().predict(pairs, activation_fn=torch.nn.Identity()))
    return np.asarray(cross_encoder().predict(pairs))


def st_tokens(texts: list[str]) -> int:
    """Tokens sentence-transformers reads of ``texts`` (cut at its max_seq_length)."""
    model = sentence_transformer()
    enc = model.tokenizer(texts, truncation=True, max_length=model.max_seq_length)
    return sum(len(ids) for ids in enc["input_ids"])


def close(got: Any, want: np.ndarray) -> None:
    """Equal to float32 rounding (the server's batches are padded as sentence-transformers' are
    not, which moves the last bits)."""
    np.testing.assert_allclose(np.asarray(got, dtype=np.float32), want, rtol=1e-5, atol=1e-6)
