"""The embedding hub: what an embedding or rerank model (``runtime: embedding``) tells the routes
that serve it, and how a route runs texts through it.

Such a model is a tensor model: every request, whichever route it came by, is an OIP request on
the data plane, so the dynamic batcher, the queue limit, timeouts, statistics and metrics are the
tensor models' own. Its signature (the batch dimension first):

- ``task: embed``: ``TEXT`` BYTES ``[-1]`` (UTF-8 texts; with the request parameter
  ``token_ids: true``, each element is instead its token ids as little-endian int32) in;
  ``EMBEDDING`` FP32 ``[-1, dim]`` and ``TOKENS`` INT64 ``[-1]`` (tokens each text was read as,
  after truncation) out.
- ``task: rerank``: ``QUERY`` BYTES ``[-1]`` and ``TEXT`` BYTES ``[-1]`` (row i scores the pair
  QUERY[i], TEXT[i]) in; ``SCORE`` FP32 ``[-1]`` (the cross-encoder's logit through its
  activation, as sentence-transformers' ``CrossEncoder.predict``), ``LOGIT`` FP32 ``[-1]`` (the raw
  logit) and ``TOKENS`` INT64 ``[-1]`` out.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from rosettaserve.core.call import PROTOCOL
from rosettaserve.core.dataplane import DataPlane
from rosettaserve.core.errors import InvalidInput, ModelNotFound, ModelNotReady
from rosettaserve.core.registry import ModelVersion, VersionState
from rosettaserve.core.types import InferenceRequest, Tensor

EMBED, RERANK = "embed", "rerank"
TEXT, QUERY, TOKEN_IDS = "TEXT", "QUERY", "token_ids"
EMBEDDING, SCORE, LOGIT, TOKENS = "EMBEDDING", "SCORE", "LOGIT", "TOKENS"
EMBEDDING_RUNTIMES = ("embedding",)


@dataclass(frozen=True)
class EmbeddingInfo:
    """What a loaded embedding model tells its routes."""

    task: str  # EMBED or RERANK
    dim: int  # the vector's size (rerank: 0)
    normalize: bool  # vectors come out of unit length
    max_tokens: int  # a text's tokens beyond this are cut (as sentence-transformers does)
    max_texts: int  # texts (or pairs) one request may hold: the model's max_batch_size
    vocab_size: int
    matryoshka: tuple[int, ...] = ()  # sizes a vector may be cut to (OpenAI's `dimensions`)
    max_chars: int = 0  # a longer text is refused, not tokenized whole to be cut (0: no limit)
    created: int = 0  # when it was loaded (Unix seconds), for model cards


@dataclass(frozen=True)
class Embedded:
    """The rows a request got back: vectors (embed) or scores (rerank), and tokens read."""

    vectors: np.ndarray  # FP32 [n, dim] (rerank: [n] scores)
    raw: np.ndarray | None  # rerank: the raw logits [n]
    tokens: np.ndarray  # INT64 [n]


def info_of(mv: ModelVersion) -> EmbeddingInfo | None:
    info = getattr(mv.model, "embedding_info", None)
    return info if isinstance(info, EmbeddingInfo) else None


async def find(dp: DataPlane, name: str, task: str) -> tuple[ModelVersion, EmbeddingInfo]:
    """The ready embedding model of that task named ``name`` (empty: the first one served); a
    version named that loads on demand is loaded first (the request waits)."""
    registry = dp.registry
    for candidate in [name] if name else sorted(registry.model_names()):
        versions = registry.versions(candidate) or []
        if not versions:
            continue
        mv = max(versions, key=lambda v: (v.ready, int(v.version)))
        if name and mv.state is VersionState.UNLOADED and mv.runtime in EMBEDDING_RUNTIMES:
            mv = await dp.wake(name, mv)
        info = info_of(mv) if mv.ready else None
        if info is not None and info.task == task:
            return mv, info
        if not name:
            continue
        if not mv.ready and mv.runtime in EMBEDDING_RUNTIMES:
            why = f": {mv.reason}" if mv.reason else ""
            raise ModelNotReady(f"model '{mv.name}' is not ready ({mv.state.value}){why}")
        raise InvalidInput(f"model '{name}' is not {_task_text(task)}")
    if name:
        raise ModelNotFound(f"the model '{name}' does not exist")
    raise ModelNotFound(f"no {_task_text(task)} is served")


def _task_text(task: str) -> str:
    if task == RERANK:
        return "a rerank model (runtime: embedding, parameters.task: rerank)"
    return "an embedding model (runtime: embedding)"


def served(dp: DataPlane) -> list[tuple[ModelVersion, EmbeddingInfo]]:
    """Every embedding model's highest ready version (for model lists)."""
    found = []
    registry = dp.registry
    for name in sorted(registry.model_names()):
        for mv in reversed(registry.versions(name) or []):
            info = info_of(mv) if mv.ready else None
            if info is not None:
                found.append((mv, info))
                break
    return found


def check_count(info: EmbeddingInfo, count: int, what: str) -> None:
    """Refused before any work: no text, or more than the model takes in one request."""
    if count == 0:
        raise InvalidInput(f"'{what}' holds no text: give at least one")
    if count > info.max_texts:
        raise InvalidInput(
            f"'{what}' holds {count} texts; this model takes at most {info.max_texts} "
            "per request (its max_batch_size)"
        )


def texts_tensor(name: str, texts: Sequence[str | bytes]) -> Tensor:
    data = np.empty(len(texts), dtype=object)
    for i, text in enumerate(texts):
        data[i] = text.encode("utf-8", "surrogatepass") if isinstance(text, str) else text
    return Tensor(name, "BYTES", (len(texts),), data)


def ids_tensor(info: EmbeddingInfo, rows: Sequence[Sequence[int]]) -> Tensor:
    """Token-id inputs as TEXT elements (int32 little-endian), each checked against the model."""
    data = np.empty(len(rows), dtype=object)
    for i, ids in enumerate(rows):
        if not ids:
            raise InvalidInput("a token-id input is empty")
        if len(ids) > info.max_tokens:
            raise InvalidInput(
                f"a token-id input has {len(ids)} tokens, more than this model reads "
                f"({info.max_tokens})"
            )
        array = np.asarray(ids, dtype=np.int64)
        if array.min() < 0 or array.max() >= info.vocab_size:
            raise InvalidInput(
                f"a token id is outside the model's vocabulary (0..{info.vocab_size - 1})"
            )
        data[i] = array.astype("<i4").tobytes()
    return Tensor(TEXT, "BYTES", (len(rows),), data)


async def embed(
    dp: DataPlane, mv: ModelVersion, protocol: str, inputs: list[Tensor], **parameters: Any
) -> Embedded:
    """Run the rows through the model on the data plane (batched with every other request)."""
    request = InferenceRequest(
        mv.name,
        inputs,
        model_version=mv.version,
        parameters=parameters,
        context={PROTOCOL: protocol},
    )
    response = await dp.infer(request)
    out = {t.name: t.data for t in response.outputs}
    if EMBEDDING in out:
        return Embedded(out[EMBEDDING], None, out[TOKENS])
    return Embedded(out[SCORE], out[LOGIT], out[TOKENS])


def texts_field(value: Any, key: str, info: EmbeddingInfo) -> list[str]:
    """A string or a list of strings, within the model's texts per request and characters per
    text."""
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list) or not all(isinstance(s, str) for s in items):
        raise InvalidInput(f"'{key}' must be a string or a list of strings")
    check_count(info, len(items), key)
    for text in items:
        check_length(info, len(text))
    return items


def check_length(info: EmbeddingInfo, chars: int) -> None:
    """A tokenizer reads a whole text before it is cut at ``max_tokens``: a text far longer than
    the model can read is refused rather than tokenized (memory grows with it)."""
    if info.max_chars and chars > info.max_chars:
        raise InvalidInput(
            f"a text has {chars} characters; this model reads {info.max_tokens} tokens of a "
            f"text and takes texts of at most {info.max_chars} characters "
            "(parameters.max_chars)"
        )


def default_max_chars(max_tokens: int) -> int:
    """Room for any text whose first ``max_tokens`` tokens a tokenizer would keep."""
    return max(64 * max_tokens, 16384)


def check_dimensions(info: EmbeddingInfo, dimensions: int | None) -> None:
    """OpenAI's ``dimensions``: the vector's own size, or one a Matryoshka model may be cut to."""
    if dimensions is None or dimensions == info.dim or dimensions in info.matryoshka:
        return
    allowed = f"one of {list(info.matryoshka)}" if info.matryoshka else "not supported"
    raise InvalidInput(
        f"'dimensions' is {dimensions}: this model's vectors have {info.dim}, and cutting them "
        f"is {allowed} (model.yaml parameters.matryoshka_dimensions)"
    )


def cut(vectors: np.ndarray, info: EmbeddingInfo, dimensions: int | None) -> np.ndarray:
    """Vectors cut to ``dimensions`` (checked), unit length again when the model normalizes
    (as vLLM answers OpenAI's ``dimensions``)."""
    if dimensions is None or dimensions == info.dim:
        return vectors
    out = vectors[:, :dimensions]
    return normalized(out) if info.normalize else np.ascontiguousarray(out)


def normalized(vectors: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    out: np.ndarray = (vectors / np.maximum(norms, 1e-12)).astype(np.float32)
    return out


def pair_tensors(query: str, texts: Sequence[str]) -> list[Tensor]:
    """A rerank request's rows: the query beside each text."""
    return [texts_tensor(QUERY, [query] * len(texts)), texts_tensor(TEXT, texts)]


def ranking(scores: np.ndarray) -> list[int]:
    """Row indices, highest score first (ties: the earlier row first)."""
    return [int(i) for i in np.argsort(-scores, kind="stable")]
