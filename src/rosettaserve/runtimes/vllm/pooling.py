"""``runtime: vllm`` with ``parameters.task: embed`` or ``rerank``: a pooling model served by
vLLM's engine (its ``AsyncLLM.encode``, the pooling runner), with the signature and the routes of
``runtime: embedding`` (core/embedding.py).

Texts (and a cross-encoder's pairs) are tokenized here as sentence-transformers tokenizes them
(cut at vLLM's ``max_model_len``, which vLLM reads from ``sentence_bert_config.json``), and vLLM
gets the token ids (and token type ids). For ``embed`` vLLM pools and normalizes as the folder's
modules say; for ``rerank`` vLLM answers the raw logit (its ``classify`` task without the
activation) and the score is that logit through ``CrossEncoder.predict``'s activation, as in
``runtime: embedding``. The rows of one ``predict`` (the dynamic batcher's batch) are submitted
together: vLLM batches them itself.
"""

from __future__ import annotations

import asyncio
import os
import time
import uuid
from typing import Any

import numpy as np

from rosettaserve.core import embedding as hub
from rosettaserve.core.generate import Fields
from rosettaserve.core.model import Arrays, Model
from rosettaserve.repository.config import ConfigError
from rosettaserve.runtimes.embedding import (
    DEFAULT_MAX_BATCH,
    activated,
    signature,
    token_rows,
    tokenized,
    utf8,
)
from rosettaserve.runtimes.embedding import folder as st_folder
from rosettaserve.runtimes.vllm.args import engine_kwargs, model_folder
from rosettaserve.runtimes.vllm.sleep import VllmSleep, sleep_mode_available

TASKS = ("generate", hub.EMBED, hub.RERANK)


class VllmPoolingModel(VllmSleep, Model):
    platform = "vllm"

    def load(self) -> None:
        from rosettaserve.runtimes.vllm.model import quiet_vllm_logging

        os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing is downloaded at run time
        os.environ.setdefault("VLLM_NO_USAGE_STATS", "1")
        quiet_vllm_logging()
        from vllm.engine.arg_utils import AsyncEngineArgs
        from vllm.v1.engine.async_llm import AsyncLLM

        params = Fields(self.config.get("parameters") or {}, "parameters")
        where = model_folder(params, self.path)
        kwargs = engine_kwargs(self.name, params, where, sleep_mode_available())
        kwargs |= {"runner": "pooling"}
        try:
            args = AsyncEngineArgs(**kwargs)
        except TypeError as exc:  # an engine argument vLLM does not know
            raise ConfigError(f"parameters.engine_args: {exc}") from None
        self.built_to_sleep(kwargs)
        self.llm: Any = AsyncLLM.from_engine_args(args)
        self.tokenizer = self.llm.get_tokenizer()
        model_config = self.llm.vllm_config.model_config
        self.task = str(params.string("task") or hub.EMBED)
        self.max_batch_size = self.max_batch_size or DEFAULT_MAX_BATCH
        hf_config = model_config.hf_config
        sizes: Any = ()  # Matryoshka sizes (embed)
        if self.task == hub.RERANK:
            self.activation = st_folder.activation(where, hf_config)
            dim, normalize = 0, False
        else:
            dim = int(model_config.get_hidden_size())
            normalize = st_folder.embedder_plan(where).normalize is not False
            sizes = getattr(hf_config, "matryoshka_dimensions", None) or ()
        self.embedding_info = hub.EmbeddingInfo(
            task=self.task,
            dim=dim,
            normalize=normalize,
            max_tokens=int(model_config.max_model_len),
            max_texts=self.max_batch_size,
            max_chars=hub.default_max_chars(int(model_config.max_model_len)),
            vocab_size=int(model_config.get_vocab_size()),
            matryoshka=tuple(sorted({int(s) for s in sizes if 0 < int(s) <= dim})),
            created=int(time.time()),
        )
        self.inputs, self.outputs = signature(self.task, dim)

    def unload(self) -> None:
        self.llm.shutdown()

    def vllm_llm(self) -> Any:
        return self.llm

    async def predict(
        self, inputs: Arrays, parameters: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        from vllm import PoolingParams

        parameters = parameters or {}
        info = self.embedding_info
        if self.task == hub.RERANK:
            queries = [utf8(b, info.max_chars) for b in inputs[hub.QUERY]]
            texts = [utf8(b, info.max_chars) for b in inputs[hub.TEXT]]
            rows = tokenized(self.tokenizer, info.max_tokens, queries, texts)
            pooling = PoolingParams(task="classify", use_activation=False)
        else:
            rows = token_rows(self.tokenizer, info, inputs[hub.TEXT], parameters)
            normalize = parameters.get("normalize") is not False
            pooling = PoolingParams(task="embed", use_activation=normalize)
        out = np.stack(await asyncio.gather(*(self._one(row, pooling) for row in rows)))
        tokens = np.array([len(ids) for ids, _ in rows], dtype=np.int64)
        if self.task == hub.RERANK:
            logits = out.reshape(-1).astype(np.float32)
            return {
                hub.SCORE: activated(logits, self.activation),
                hub.LOGIT: logits,
                hub.TOKENS: tokens,
            }
        return {hub.EMBEDDING: out.astype(np.float32, copy=False), hub.TOKENS: tokens}

    async def _one(self, row: Any, pooling: Any) -> np.ndarray:
        ids, types = row
        if self.task == hub.RERANK:
            # vLLM reads a pair's token types as where the second text starts (its score path
            # sends them so; in the prompt they would be dropped)
            second = types.index(1) if 1 in types else len(types)
            pooling = pooling.clone()
            pooling.extra_kwargs = {"compressed_token_type_ids": second}
        prompt = {"type": "token", "prompt_token_ids": ids}
        final = None
        async for output in self.llm.encode(prompt, pooling, f"pool-{uuid.uuid4().hex}"):
            final = output
        assert final is not None
        data: np.ndarray = final.outputs.data.float().numpy()
        return data


def create(name: str, version: str, path: Any, config: Any) -> Model:
    """The model of ``runtime: vllm``: a text generator, or with ``task: embed`` a pooling
    model."""
    task = (config.get("parameters") or {}).get("task", "generate")
    if task not in TASKS:
        raise ConfigError(f"parameters.task of runtime: vllm is {task!r}: one of {TASKS}")
    if task in (hub.EMBED, hub.RERANK):
        return VllmPoolingModel(name=name, version=version, path=path, config=config)
    from rosettaserve.runtimes.vllm.model import VllmModel

    return VllmModel(name=name, version=version, path=path, config=config)
