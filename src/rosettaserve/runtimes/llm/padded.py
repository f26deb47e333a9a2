"""A prefill pass as a padded batch: one row per prompt, for prompts that start on a past.

Packing (prefill.py) puts every prompt of a pass in one row, so each token's attention spans
all the pass's pasts and new tokens, most of them masked. When the prompts carry long pasts (a
prefix cache hit, a later chunk), one row each is cheaper: the pasts are left-padded to the
longest, the new tokens to the longest chunk, and each token attends over its own row only.
An additive 4-D mask hides the padding; position ids count from each row's own past.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from rosettaserve.runtimes.llm.batch import KV, Runner, cache_kv, make_cache

Chunks = list[tuple[Any, int]]  # (PrefillJob, tokens this pass)


def cheaper(chunks: Chunks) -> bool:
    """Whether a padded batch costs less than one packed row: clearly less attention, and
    padding that at most doubles the tokens through the model."""
    rows, width = len(chunks), max(take for _, take in chunks)
    longest = max(job.done for job, _ in chunks)
    tokens = sum(take for _, take in chunks)
    pasts = sum(job.done for job, _ in chunks)
    padded = rows * width * (longest + width)
    return rows * width <= 2 * tokens and 2 * padded < tokens * (pasts + tokens)


def forward(runner: Runner, chunks: Chunks) -> list[tuple[KV, torch.Tensor | None]]:
    """Each job's new cache ``[1, kv_heads, take, head_dim]`` per layer, and the logits
    ``[keep, V]`` of each job that this pass finishes (None for the others)."""
    past = max(job.done for job, _ in chunks)
    width = max(take for _, take in chunks)
    ids = torch.zeros(len(chunks), width, dtype=torch.long)
    positions = torch.zeros(len(chunks), width, dtype=torch.long)
    for row, (job, take) in enumerate(chunks):
        ids[row, width - take :] = torch.tensor(job.tokens[job.done : job.done + take])
        positions[row, width - take :] = torch.arange(job.done, job.done + take)
    keep = max(job.keep for job, _ in chunks)
    out = runner.model(
        input_ids=ids.to(runner.device),
        position_ids=positions.to(runner.device),
        attention_mask=_mask(chunks, past, width, runner.dtype).to(runner.device),
        past_key_values=make_cache(_stack(chunks, past)),
        use_cache=True,
        **runner.keep_logits(keep),
    )
    logits = out.logits.float().cpu()
    new = cache_kv(out.past_key_values)
    results: list[tuple[KV, torch.Tensor | None]] = []
    for row, (job, take) in enumerate(chunks):
        mine = [(k[row : row + 1, :, -take:], v[row : row + 1, :, -take:]) for k, v in new]
        results.append((mine, logits[row, -job.keep :] if job.remaining == take else None))
    return results


def _mask(chunks: Chunks, past: int, width: int, dtype: torch.dtype) -> torch.Tensor:
    """The additive mask ``[rows, 1, width, past + width]``: 0 where a token may look."""
    allowed = torch.zeros(len(chunks), width, past + width, dtype=torch.bool)
    causal = torch.ones(width, width, dtype=torch.bool).tril()
    for row, (job, take) in enumerate(chunks):
        pad = width - take
        allowed[row, pad:, past - job.done : past] = True  # its own past
        allowed[row, :, past:] = causal
        allowed[row, :, past : past + pad] = False
        allowed[row, torch.arange(pad), past + torch.arange(pad)] = True  # padding sees itself
    bias = torch.zeros(allowed.shape, dtype=dtype).masked_fill(~allowed, torch.finfo(dtype).min)
    return bias[:, None]


def _stack(chunks: Chunks, past: int) -> KV:
    """The rows' pasts, left-padded to ``past`` tokens and stacked (none if no row has one)."""
    first = next((job.kv for job, _ in chunks if job.kv is not None), None)
    if first is None or past == 0:
        return []
    layers = []
    for layer, (k0, v0) in enumerate(first):
        keys, values = [], []
        for job, _ in chunks:
            if job.kv is None:
                keys.append(k0.new_zeros((1, k0.shape[1], past, k0.shape[3])))
                values.append(v0.new_zeros((1, v0.shape[1], past, v0.shape[3])))
            else:
                k, v = job.kv[layer]
                keys.append(F.pad(k, (0, 0, past - k.shape[2], 0)))
                values.append(F.pad(v, (0, 0, past - v.shape[2], 0)))
        layers.append((torch.cat(keys), torch.cat(values)))
    return layers
