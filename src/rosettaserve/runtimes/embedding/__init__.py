"""The ``embedding`` runtime: a transformers or sentence-transformers folder as a batched tensor
model that turns texts into vectors (``task: embed``) or (query, text) pairs into scores
(``task: rerank``, a cross-encoder), with transformers and torch directly.

Its signature is core/embedding.py's. Texts are read as sentence-transformers reads them: the
folder's pooling and normalization (folder.py), else ``parameters.pooling`` and
``parameters.normalize``; tokens beyond the model's length cut (``truncation='longest_first'``,
the length from ``sentence_bert_config.json``, else the tokenizer's and the position
embeddings'). ``predict`` runs on the version's own thread, never on the event loop; the dynamic
batcher hands it many requests' rows at once, which run sorted by length in padded batches
(encode.py).
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from rosettaserve.core import embedding as hub
from rosettaserve.core.errors import InvalidInput
from rosettaserve.core.model import Arrays, Model
from rosettaserve.core.types import TensorSpec
from rosettaserve.repository.config import ConfigError
from rosettaserve.runtimes.embedding import encode, folder

DEFAULT_MAX_BATCH = 32  # texts per request when model.yaml gives no max_batch_size
DTYPES = ("float32", "float16", "bfloat16")


class EmbeddingModel(Model):
    platform = "embedding"
    net: Any = None
    dim = 0
    normalize = False

    def load(self) -> None:
        import torch
        from transformers import AutoConfig, AutoTokenizer

        params = self.config.get("parameters") or {}
        where = self.path / str(params["path"]) if params.get("path") else self.path
        task = str(params.get("task", hub.EMBED))
        if task not in (hub.EMBED, hub.RERANK):
            raise ConfigError(f"parameters.task is {task!r}: embed or rerank")
        if params.get("threads"):
            torch.set_num_threads(int(params["threads"]))
        self.device = torch.device(str(params.get("device", "cpu")))
        dtype = getattr(torch, str(params.get("dtype", "float32")))
        auto: Any = AutoTokenizer  # (transformers' Auto classes are loosely typed)
        self.tokenizer = auto.from_pretrained(where, local_files_only=True)
        config = AutoConfig.from_pretrained(where, local_files_only=True)
        self.batch_tokens = int(params.get("batch_tokens", 8192))
        self.task = task
        if task == hub.EMBED:
            self._load_embedder(where, params, config)
        else:
            self._load_reranker(where, config)
        self.net = self.net.to(self.device, dtype).eval()
        self.pad_id = int(self.tokenizer.pad_token_id or 0)
        self.max_batch_size = self.max_batch_size or DEFAULT_MAX_BATCH
        self.embedding_info = hub.EmbeddingInfo(
            task=task,
            dim=self.dim,
            normalize=self.normalize,
            max_tokens=self.max_tokens,
            max_texts=self.max_batch_size,
            max_chars=int(params.get("max_chars", hub.default_max_chars(self.max_tokens))),
            vocab_size=len(self.tokenizer),
            matryoshka=self._matryoshka(params, config),
            created=int(time.time()),
        )
        self.inputs, self.outputs = signature(task, self.dim)

    def _load_embedder(self, where: Any, params: dict[str, Any], config: Any) -> None:
        from transformers import AutoModel

        plan = folder.embedder_plan(where)
        self.pooling = str(params.get("pooling") or plan.pooling or "mean")
        if self.pooling not in folder.POOLINGS:
            raise ConfigError(f"parameters.pooling is {self.pooling!r}: one of {folder.POOLINGS}")
        chosen = params.get("normalize")
        self.normalize = bool(
            chosen
            if chosen is not None
            else (plan.normalize if plan.normalize is not None else True)
        )
        self.lower_case, self.prompt = plan.lower_case, plan.prompt
        self.max_tokens = _max_tokens(params, plan.max_seq_length, self.tokenizer, config)
        self.net = AutoModel.from_pretrained(where, local_files_only=True)
        self.dim = int(config.hidden_size)

    def _load_reranker(self, where: Any, config: Any) -> None:
        from transformers import AutoModelForSequenceClassification

        if int(config.num_labels) != 1:
            raise ConfigError(
                "task: rerank needs a cross-encoder with one label; this one has "
                f"{config.num_labels}"
            )
        self.activation = folder.activation(where, config)
        self.normalize, self.dim, self.lower_case, self.prompt = False, 0, False, ""
        self.max_tokens = _max_tokens(
            self.config.get("parameters") or {}, None, self.tokenizer, config
        )
        self.net = AutoModelForSequenceClassification.from_pretrained(where, local_files_only=True)

    def _matryoshka(self, params: dict[str, Any], config: Any) -> tuple[int, ...]:
        sizes = params.get("matryoshka_dimensions") or getattr(
            config, "matryoshka_dimensions", None
        )
        if sizes is None and getattr(config, "is_matryoshka", False):
            sizes = range(1, self.dim + 1)
        return tuple(sorted({int(s) for s in sizes or () if 0 < int(s) <= self.dim}))

    def unload(self) -> None:
        self.net = None

    def predict(self, inputs: Arrays, parameters: dict[str, Any] | None = None) -> dict[str, Any]:
        if self.task == hub.RERANK:
            return self._rerank(inputs)
        parameters = parameters or {}
        rows = token_rows(
            self.tokenizer,
            self.embedding_info,
            inputs[hub.TEXT],
            parameters,
            prompt=self.prompt,
            lower_case=self.lower_case,
        )
        normalize = self.normalize and parameters.get("normalize") is not False

        def forward(ids: np.ndarray, types: np.ndarray, mask: np.ndarray) -> np.ndarray:
            return self._embed_batch(ids, types, mask, normalize)

        vectors = encode.run(rows, self.batch_tokens, self.pad_id, forward)
        tokens = np.array([len(ids) for ids, _ in rows], dtype=np.int64)
        return {hub.EMBEDDING: vectors, hub.TOKENS: tokens}

    def _embed_batch(
        self, ids: np.ndarray, types: np.ndarray, mask: np.ndarray, normalize: bool
    ) -> np.ndarray:
        import torch

        with torch.inference_mode():
            mask_t = torch.from_numpy(mask).to(self.device)
            hidden = self.net(**self._features(ids, types, mask_t))[0]
            vectors = encode.pool(hidden, mask_t, self.pooling).float()
            if normalize:
                vectors = torch.nn.functional.normalize(vectors, p=2, dim=1)
            out: np.ndarray = vectors.cpu().numpy()
            return out

    def _features(self, ids: np.ndarray, types: np.ndarray, mask: Any) -> dict[str, Any]:
        import torch

        features = {"input_ids": torch.from_numpy(ids).to(self.device), "attention_mask": mask}
        if "token_type_ids" in self.tokenizer.model_input_names:
            features["token_type_ids"] = torch.from_numpy(types).to(self.device)
        return features

    def _rerank(self, inputs: Arrays) -> dict[str, Any]:
        limit = self.embedding_info.max_chars
        queries = [utf8(b, limit) for b in inputs[hub.QUERY]]
        texts = [utf8(b, limit) for b in inputs[hub.TEXT]]
        rows = tokenized(self.tokenizer, self.max_tokens, queries, texts)
        logits = encode.run(rows, self.batch_tokens, self.pad_id, self._score_batch)
        tokens = np.array([len(ids) for ids, _ in rows], dtype=np.int64)
        return {
            hub.SCORE: activated(logits, self.activation),
            hub.LOGIT: logits,
            hub.TOKENS: tokens,
        }

    def _score_batch(self, ids: np.ndarray, types: np.ndarray, mask: np.ndarray) -> np.ndarray:
        import torch

        with torch.inference_mode():
            mask_t = torch.from_numpy(mask).to(self.device)
            logits = self.net(**self._features(ids, types, mask_t)).logits[:, 0]
            out: np.ndarray = logits.float().cpu().numpy()
            return out


def signature(task: str, dim: int) -> tuple[list[TensorSpec], list[TensorSpec]]:
    """core/embedding.py's signature of a task (``dim``: the vector's size)."""
    text, tokens = TensorSpec(hub.TEXT, "BYTES", (-1,)), TensorSpec(hub.TOKENS, "INT64", (-1,))
    if task == hub.RERANK:
        scores = [TensorSpec(n, "FP32", (-1,)) for n in (hub.SCORE, hub.LOGIT)]
        return [TensorSpec(hub.QUERY, "BYTES", (-1,)), text], [*scores, tokens]
    return [text], [TensorSpec(hub.EMBEDDING, "FP32", (-1, dim)), tokens]


def activated(logits: np.ndarray, activation: str) -> np.ndarray:
    """A cross-encoder's logits through its activation (folder.activation), as torch computes
    it in ``CrossEncoder.predict``."""
    import torch

    t = torch.from_numpy(logits)
    if activation == "sigmoid":
        t = torch.sigmoid(t)
    elif activation == "tanh":
        t = torch.tanh(t)
    out: np.ndarray = t.numpy().astype(np.float32)
    return out


def token_rows(
    tokenizer: Any,
    info: hub.EmbeddingInfo,
    raw: np.ndarray,
    parameters: dict[str, Any],
    *,
    prompt: str = "",
    lower_case: bool = False,
) -> list[encode.Row]:
    """The TEXT elements as rows of token ids: texts tokenized as sentence-transformers does (its
    default prompt first, lower-cased where its config says), or token ids as they are."""
    if parameters.get(hub.TOKEN_IDS):
        return [_ids_row(b, info) for b in raw]
    texts = [prompt + utf8(b, info.max_chars) for b in raw]
    return tokenized(tokenizer, info.max_tokens, [t.lower() if lower_case else t for t in texts])


def tokenized(
    tokenizer: Any, max_tokens: int, texts: list[str], pairs: list[str] | None = None
) -> list[encode.Row]:
    """Texts (or text pairs) cut at ``max_tokens`` as sentence-transformers cuts them."""
    enc = tokenizer(texts, pairs, truncation="longest_first", max_length=max_tokens, padding=False)
    ids = enc["input_ids"]
    types = enc.get("token_type_ids") or [[0] * len(row) for row in ids]
    return list(zip(ids, types, strict=True))


def _max_tokens(
    params: dict[str, Any], folder_says: int | None, tokenizer: Any, config: Any
) -> int:
    """parameters.max_length, else sentence_bert_config's max_seq_length, else the least of the
    tokenizer's model_max_length and the position embeddings (sentence-transformers' order)."""
    if params.get("max_length"):
        return int(params["max_length"])
    if folder_says:
        return int(folder_says)
    limits = [int(tokenizer.model_max_length)]
    positions = getattr(config, "max_position_embeddings", None)
    if positions and int(positions) > 0:
        limits.append(int(positions))
    return min(limits)


def utf8(raw: Any, limit: int = 0) -> str:
    """A TEXT element as text, at most ``limit`` characters (0: all). The routes refuse a longer
    text before it gets here; over OIP it is cut, and bytes that are not UTF-8 are replaced
    (rather than failing the other requests batched with it)."""
    text = raw if isinstance(raw, str) else bytes(raw).decode("utf-8", errors="replace")
    return text[:limit] if limit and len(text) > limit else text


def _ids_row(raw: Any, info: hub.EmbeddingInfo) -> encode.Row:
    data = bytes(raw)
    if not data or len(data) % 4:
        raise InvalidInput("a token-id element must hold int32 ids (a multiple of 4 bytes)")
    ids = np.frombuffer(data, dtype="<i4")
    if len(ids) > info.max_tokens or ids.min() < 0 or ids.max() >= info.vocab_size:
        raise InvalidInput(
            f"token ids must be at most {info.max_tokens} ids within 0..{info.vocab_size - 1}"
        )
    return ids.tolist(), [0] * len(ids)
