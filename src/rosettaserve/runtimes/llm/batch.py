"""The model's two steps, kept apart: prefill one prompt, decode one token for a batch.

A prompt's KV cache is one ``(keys, values)`` pair per layer, each ``[1, kv_heads, T, head_dim]``,
the form that can also travel to another instance; ``Runner.prefill`` computes it for one
prompt alone, the engine's prefill passes (prefill.py) for several prompts and chunks at once.
The decode batch keeps the running sequences' caches stacked and left-padded
(``[B, kv_heads, L, head_dim]`` with a ``[B, L]`` attention mask); sequences join and leave it
between steps, and each step appends one column for everyone.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

KV = list[tuple[torch.Tensor, torch.Tensor]]


def cache_kv(cache: Any) -> KV:
    """Per-layer keys and values of a transformers ``DynamicCache`` (4.x and 5.x layouts)."""
    layers = getattr(cache, "layers", None)
    if layers is not None:
        return [(layer.keys, layer.values) for layer in layers]
    return list(zip(cache.key_cache, cache.value_cache, strict=True))


def make_cache(kv: KV) -> Any:
    from transformers import DynamicCache

    cache = DynamicCache()
    for i, (k, v) in enumerate(kv):
        cache.update(k, v, i)
    return cache


class Runner:
    """Forward passes of one causal LM."""

    def __init__(self, model: Any, device: torch.device) -> None:
        import inspect

        self.model = model
        self.device = device
        self.dtype: torch.dtype = next(model.parameters()).dtype
        keep = inspect.signature(model.forward).parameters
        self._last_only = (
            {"logits_to_keep": 1}
            if "logits_to_keep" in keep
            else {"num_logits_to_keep": 1}
            if "num_logits_to_keep" in keep
            else {}
        )

    def keep_logits(self, keep: int | torch.Tensor) -> dict[str, int | torch.Tensor]:
        """The forward argument that computes only the logits of the last ``keep`` positions
        (an int) or of the positions listed (a tensor of indices); none if the model has none."""
        return dict.fromkeys(self._last_only, keep)

    def prefill(self, prompt_ids: list[int]) -> tuple[torch.Tensor, KV]:
        """Last-position logits ``[V]`` and the prompt's KV cache."""
        logits, kv = self.prefill_many(prompt_ids, 1)
        return logits[-1], kv

    @torch.inference_mode()
    def prefill_many(self, prompt_ids: list[int], keep: int) -> tuple[torch.Tensor, KV]:
        """Logits ``[keep, V]`` of the last ``keep`` positions, and the prompt's KV cache."""
        ids = torch.tensor([prompt_ids], dtype=torch.long, device=self.device)
        positions = torch.arange(len(prompt_ids), device=self.device).unsqueeze(0)
        out = self.model(
            input_ids=ids,
            position_ids=positions,
            past_key_values=make_cache([]),
            use_cache=True,
            **self.keep_logits(keep),
        )
        return out.logits[0, -keep:].float().cpu(), cache_kv(out.past_key_values)

    @torch.inference_mode()
    def decode(
        self, tokens: list[int], positions: torch.Tensor, bias: torch.Tensor, cache: Any
    ) -> tuple[torch.Tensor, Any]:
        """One token per row; ``bias`` is the additive attention mask ``[B, 1, 1, L + 1]``
        (0: attend, dtype minimum: padding) that transformers takes as it is."""
        ids = torch.tensor(tokens, dtype=torch.long, device=self.device).unsqueeze(1)
        out = self.model(
            input_ids=ids,
            position_ids=positions.unsqueeze(1),
            attention_mask=bias,
            past_key_values=cache,
            use_cache=True,
        )
        return out.logits[:, -1].float().cpu(), out.past_key_values  # sampling runs on the CPU


class DecodeBatch:
    """Stacked, left-padded KV caches of the running sequences; rows follow ``join`` order.

    Padding is masked with an additive bias row per sequence (0 or the dtype's minimum): a
    ready 4D mask spares transformers building one per step.
    """

    def __init__(self, runner: Runner) -> None:
        self.runner = runner
        self._masked = torch.finfo(runner.dtype).min
        self.clear()

    def clear(self) -> None:
        self.size = 0
        self._cache: Any = None
        self._bias = torch.zeros(0, 0, dtype=self.runner.dtype, device=self.runner.device)
        self._lengths = torch.zeros(0, dtype=torch.long)  # tokens in each row's cache

    def join(self, kvs: list[KV]) -> None:
        """Append rows (each a single sequence's cache), padding everyone to the longest."""
        if not kvs:
            return
        old = cache_kv(self._cache) if self.size else []
        width = max([self._bias.shape[1]] + [kv[0][0].shape[2] for kv in kvs])
        layers = []
        for layer in range(len(kvs[0])):
            keys = [_left_pad(kv[layer][0], width) for kv in kvs]
            values = [_left_pad(kv[layer][1], width) for kv in kvs]
            if old:
                keys.insert(0, _left_pad(old[layer][0], width))
                values.insert(0, _left_pad(old[layer][1], width))
            layers.append((torch.cat(keys), torch.cat(values)))
        lengths = torch.tensor([kv[0][0].shape[2] for kv in kvs], dtype=torch.long)
        bias = torch.full((len(kvs), width), self._masked, dtype=self.runner.dtype)
        for row, n in enumerate(lengths.tolist()):
            bias[row, width - n :] = 0.0
        pad = width - self._bias.shape[1]
        old_bias = F.pad(self._bias, (pad, 0), value=self._masked) if pad else self._bias
        self._bias = torch.cat([old_bias, bias.to(self.runner.device)])
        self._lengths = torch.cat([self._lengths, lengths])
        self._cache = make_cache(layers)
        self.size = len(self._lengths)

    def keep(self, rows: list[int]) -> None:
        """Keep only ``rows`` (in that order); trims padding nobody needs any more."""
        if len(rows) == self.size:
            return
        if not rows:
            self.clear()
            return
        index = torch.tensor(rows, dtype=torch.long)
        bias = self._bias.index_select(0, index.to(self._bias.device))
        first = int((bias == 0).any(dim=0).nonzero()[0])
        self._bias = bias[:, first:]
        self._lengths = self._lengths.index_select(0, index)
        kv = cache_kv(self._cache)
        at = index.to(kv[0][0].device)
        self._cache = make_cache(
            [
                (k.index_select(0, at)[:, :, first:], v.index_select(0, at)[:, :, first:])
                for k, v in kv
            ]
        )
        self.size = len(rows)

    def row_kv(self, row: int) -> KV:
        """One row's cache without its padding (what a prefill instance would ship)."""
        n = int(self._lengths[row])
        return [
            (k[row : row + 1, :, -n:], v[row : row + 1, :, -n:]) for k, v in cache_kv(self._cache)
        ]

    def step(self, tokens: list[int]) -> torch.Tensor:
        """Feed each row its last token; returns next-token logits ``[B, V]``."""
        self._bias = torch.cat([self._bias, self._bias.new_zeros(self.size, 1)], dim=1)
        positions = self._lengths.to(self.runner.device)
        bias = self._bias[:, None, None, :]
        logits, self._cache = self.runner.decode(tokens, positions, bias, self._cache)
        self._lengths = self._lengths + 1
        return logits


def _left_pad(t: torch.Tensor, width: int) -> torch.Tensor:
    pad = width - t.shape[2]
    return F.pad(t, (0, 0, pad, 0)) if pad else t
