"""Rows of token ids through the network: sorted by length, cut into padded batches of at most
``batch_tokens`` (rows x longest row), one forward each, the results put back in request order.
Pooling is sentence-transformers' own arithmetic (right padding), so vectors equal its
``encode`` to float32 rounding."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np

Row = tuple[list[int], list[int]]  # token ids, token type ids


def batches(rows: Sequence[Row], batch_tokens: int) -> Iterator[list[int]]:
    """Indices of ``rows`` in padded batches, longest first: each batch's rows times its
    longest row stays within ``batch_tokens`` (a single longer row runs alone)."""
    order = sorted(range(len(rows)), key=lambda i: -len(rows[i][0]))
    batch: list[int] = []
    for i in order:
        longest = len(rows[batch[0]][0]) if batch else len(rows[i][0])
        if batch and (len(batch) + 1) * longest > batch_tokens:
            yield batch
            batch = []
        batch.append(i)
    if batch:
        yield batch


def padded(rows: Sequence[Row], pad_id: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """input_ids, token_type_ids and attention_mask [rows, longest], padded on the right."""
    width = max(len(ids) for ids, _ in rows)
    ids = np.full((len(rows), width), pad_id, dtype=np.int64)
    types = np.zeros((len(rows), width), dtype=np.int64)
    mask = np.zeros((len(rows), width), dtype=np.int64)
    for r, (row_ids, row_types) in enumerate(rows):
        ids[r, : len(row_ids)] = row_ids
        types[r, : len(row_types)] = row_types
        mask[r, : len(row_ids)] = 1
    return ids, types, mask


def pool(hidden: Any, mask: Any, how: str) -> Any:
    """Token vectors [b, t, h] and the attention mask [b, t] to one vector per row."""
    import torch

    if how == "cls":
        return hidden[:, 0]
    weights = mask.unsqueeze(-1).expand_as(hidden).to(hidden.dtype)
    if how == "max":
        return hidden.masked_fill(weights == 0, float("-inf")).max(dim=1).values
    if how == "last":
        last = mask.sum(dim=1) - 1
        return (hidden * weights)[torch.arange(hidden.shape[0]), last]
    total = (hidden * weights).sum(dim=1)
    count = torch.clamp(weights.sum(dim=1), min=1e-9)
    return total / (count if how == "mean" else torch.sqrt(count))


def run(
    rows: Sequence[Row],
    batch_tokens: int,
    pad_id: int,
    forward: Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray],
) -> np.ndarray:
    """``forward`` over every batch of ``rows``; its per-row results in the rows' order."""
    out: np.ndarray | None = None
    for batch in batches(rows, batch_tokens):
        result = forward(*padded([rows[i] for i in batch], pad_id))
        if out is None:
            out = np.empty((len(rows), *result.shape[1:]), dtype=np.float32)
        out[batch] = result
    assert out is not None
    return out
