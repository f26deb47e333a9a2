"""A prefill pass over fresh prompts as a few packed rows instead of one.

Packing every prompt of a pass into one row (prefill.py) makes each token's attention span the
whole pass, masked: its cost grows with the square of the pass's tokens. A burst of 32 short
prompts (~450 tokens) spent most of its pass there (11.9 ms, against 4.2 ms for 16 of them).
Prompts without a past are laid one after the other into rows of about ``ROW_TOKENS`` tokens
(a prompt is never split across rows), the rows right-padded to the longest; each token sees
its own prompt's earlier tokens only, through an additive ``[rows, 1, width, width]`` mask.
"""

from __future__ import annotations

import itertools
from typing import Any

import torch

from rosettaserve.runtimes.llm.batch import KV, Runner, cache_kv, make_cache

Chunks = list[tuple[Any, int]]  # (PrefillJob, tokens this pass)
# Tokens of a row: short enough that attention stays cheap, long enough that the rows' padding
# and per-row work stay small.
ROW_TOKENS = 96


def layout(chunks: Chunks) -> list[list[int]] | None:
    """The chunks (indices) of each row, in order; None when rows do not apply: a job has a
    past, everything fits in one row anyway, or padding would more than double the tokens
    through the model (a long prompt among short ones: its row sets every row's width)."""
    if any(job.done for job, _ in chunks):
        return None
    rows: list[list[int]] = [[]]
    filled = 0
    for i, (_, take) in enumerate(chunks):
        if rows[-1] and filled + take > ROW_TOKENS:
            rows.append([])
            filled = 0
        rows[-1].append(i)
        filled += take
    width = max(sum(chunks[i][1] for i in row) for row in rows)
    tokens = sum(take for _, take in chunks)
    return rows if len(rows) > 1 and len(rows) * width <= 2 * tokens else None


def forward(
    runner: Runner, chunks: Chunks, rows: list[list[int]]
) -> list[tuple[KV, torch.Tensor | None]]:
    """Each job's new cache ``[1, kv_heads, take, head_dim]`` per layer, and the logits
    ``[keep, V]`` of each job that this pass finishes (None for the others)."""
    starts = _starts(chunks, rows)
    width = max(sum(chunks[i][1] for i in row) for row in rows)
    ids: list[int] = []  # row after row; owner: the chunk of each position (-1: padding)
    positions: list[int] = []
    owner: list[int] = []
    for row in rows:
        row_ids = [t for i in row for t in chunks[i][0].tokens[: chunks[i][1]]]
        pad = [0] * (width - len(row_ids))
        ids += row_ids + pad
        positions += [p for i in row for p in range(chunks[i][1])] + pad
        owner += [i for i in row for _ in range(chunks[i][1])] + [-1] * len(pad)
    shape = (len(rows), width)
    wanted = [_wanted(job, take, starts[i]) for i, (job, take) in enumerate(chunks)]
    keep = sorted({p for want in wanted for p in want})
    out = runner.model(
        input_ids=torch.tensor(ids, dtype=torch.long, device=runner.device).view(shape),
        position_ids=torch.tensor(positions, dtype=torch.long, device=runner.device).view(shape),
        attention_mask=_mask(torch.tensor(owner).view(shape), runner.dtype).to(runner.device),
        past_key_values=make_cache([]),
        use_cache=True,
        **runner.keep_logits(torch.tensor(keep or [0], dtype=torch.long, device=runner.device)),
    )
    row_of = {i: r for r, row in enumerate(rows) for i in row}
    logits = _picked(out.logits, [row_of[i] for i in range(len(chunks))], wanted, keep)
    new = cache_kv(out.past_key_values)
    results: list[tuple[KV, torch.Tensor | None]] = []
    for i, (_, take) in enumerate(chunks):
        r, at = row_of[i], starts[i]
        mine = [(k[r : r + 1, :, at : at + take], v[r : r + 1, :, at : at + take]) for k, v in new]
        results.append((mine, logits[i]))
    return results


def _picked(
    logits: torch.Tensor, row_of: list[int], wanted: list[list[int]], keep: list[int]
) -> list[torch.Tensor | None]:
    """Each chunk's logits ``[len(wanted), V]`` (None if it wants none), taken in one gather
    from the model's ``[rows, len(keep) or width, V]``."""
    width = logits.shape[1]
    column = {p: c for c, p in enumerate(keep)} if width == len(keep) else {}
    index = [column.get(p, p) for want in wanted for p in want]
    rows = [r for r, want in zip(row_of, wanted, strict=True) for _ in want]
    at = logits.device
    flat = logits[torch.tensor(rows, device=at), torch.tensor(index, device=at)].float().cpu()
    ends = list(itertools.accumulate(len(want) for want in wanted))
    pairs = zip(wanted, ends, strict=True)
    return [flat[end - len(want) : end] if want else None for want, end in pairs]


def _starts(chunks: Chunks, rows: list[list[int]]) -> list[int]:
    """Where each chunk starts in its row."""
    starts = [0] * len(chunks)
    for row in rows:
        at = 0
        for i in row:
            starts[i] = at
            at += chunks[i][1]
    return starts


def _wanted(job: Any, take: int, start: int) -> list[int]:
    """The row positions whose logits the job needs: its last ``keep`` if this pass ends it."""
    if job.remaining != take:
        return []
    return list(range(start + take - job.keep, start + take))


def _mask(owner: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """The additive mask ``[rows, 1, width, width]`` from the chunk owning each position (-1:
    padding): 0 where a token may look, at its own chunk's earlier tokens and itself. Padding
    at a row's end sees the padding before it (no row of the softmax is empty)."""
    width = owner.shape[1]
    causal = torch.ones(width, width, dtype=torch.bool).tril()
    allowed = (owner[:, :, None] == owner[:, None, :]) & causal
    bias = torch.zeros(allowed.shape, dtype=dtype).masked_fill(~allowed, torch.finfo(dtype).min)
    return bias[:, None]
