"""The engine's KV cache hand-over, as prefill/decode disaggregation asks for it
(core/pd_engine.py ``KvHandover``): what a cache of its model looks like, a cache read from the
wire moved to its device, sequences submitted from elsewhere than their prompt, and its prefix
cache (which a prefill instance reports the contents of)."""

from __future__ import annotations

import hashlib
import json
from typing import TYPE_CHECKING, Any

import torch

from rosettaserve.core.errors import InvalidInput
from rosettaserve.core.generate import GenerateRequest
from rosettaserve.core.pd_engine import ITEM_BYTES, KV, Geometry, Resume
from rosettaserve.runtimes.llm.stream import GenerationStream

if TYPE_CHECKING:
    from rosettaserve.runtimes.llm.engine import Engine
    from rosettaserve.runtimes.llm.prefix_cache import PrefixCache


class KvPort:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._geometry: Geometry | None = None

    @property
    def prefix_cache(self) -> PrefixCache:
        return self.engine.prefix_cache

    def check_ids(self, ids: list[int]) -> None:
        vocab = self.engine.vocab
        bad = [i for i in ids if i >= vocab]
        if bad:
            raise InvalidInput(f"token id {bad[0]} is out of range [0, {vocab})")
        if len(ids) >= self.engine.config.max_model_len:
            raise InvalidInput(f"{len(ids)} tokens do not fit the context window")

    def submit(
        self, request: GenerateRequest, prompt_ids: list[int], resume: Resume | None = None
    ) -> GenerationStream:
        return self.engine.submit(request, prompt_ids, resume)

    def kv_geometry(self) -> Geometry:
        if self._geometry is None:  # (the fingerprint reads the weights: once)
            self._geometry = geometry(self.engine.runner.model)
        return self._geometry

    def kv_to_device(self, kv: KV) -> KV:
        device = self.engine.runner.device
        return [(k.to(device), v.to(device)) for k, v in kv]


def geometry(model: Any) -> Geometry:
    """From a transformers model: its layer count, KV heads, head size, dtype, and a fingerprint
    of its config (two instances must serve the same model to share caches)."""
    config = model.config
    heads = int(config.num_attention_heads)
    kv_heads = int(getattr(config, "num_key_value_heads", None) or heads)
    head_dim = int(getattr(config, "head_dim", None) or config.hidden_size // heads)
    dtype = str(next(model.parameters()).dtype).removeprefix("torch.")
    if dtype not in ITEM_BYTES:
        raise KeyError(f"a KV cache of {dtype} is not carried")
    return Geometry(int(config.num_hidden_layers), kv_heads, head_dim, dtype, fingerprint(model))


def fingerprint(model: Any) -> str:
    """The config (without where it was loaded from) and a sample of the first and last
    weights: equal for the same model in any folder, unequal for other weights."""
    doc = {k: v for k, v in model.config.to_dict().items() if not k.startswith("_")}
    digest = hashlib.sha256(json.dumps(doc, sort_keys=True, default=str).encode())
    params = list(model.parameters())
    for param in (params[0], params[-1]):
        flat = param.detach().reshape(-1)
        sample = flat[:: max(1, flat.numel() // 4096)].to("cpu", torch.float32).contiguous()
        digest.update(sample.numpy().tobytes())
    return digest.hexdigest()[:32]
