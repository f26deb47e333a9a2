"""Batched and chunked prefill: the prompts being prefilled, and one forward pass over them.

A prompt being prefilled is a ``PrefillJob``: its tokens, how many of them already have their
KV cache (from the prefix cache or from earlier chunks), and that cache. Each engine step runs
at most one prefill forward pass of at most ``budget`` new tokens (``plan``), then a decode
step: a long prompt is prefilled a chunk per step, interleaved with the decode steps of the
running sequences, and prompts that arrive together share passes.

The pass packs its prompts into one row, without padding: their cached parts one after the
other as the past, their new tokens one after the other as the input. An additive 4-D mask
lets each token see its own prompt's past and its own prompt's earlier tokens; position ids
count from each prompt's own past length. A pass over one prompt runs without a mask, exactly
as an unbatched prefill does. When the prompts carry long pasts (prefix cache hits, later
chunks), a padded batch of one row per prompt costs less attention (padded.py); many prompts
without a past go as a few packed rows (rows.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from rosettaserve.runtimes.llm import padded, rows
from rosettaserve.runtimes.llm.batch import KV, Runner, cache_kv, make_cache


@dataclass(eq=False)
class PrefillJob:
    owner: Any  # the engine's group of sequences sharing this prompt
    tokens: list[int]  # everything to prefill: the prompt and any replayed output tokens
    keep: int = 1  # positions at the end whose logits are needed
    done: int = 0  # tokens whose KV is in ``kv``
    kv: KV | None = None  # ``[1, kv_heads, done, head_dim]`` per layer
    started: bool = False  # it had a chunk: ``done`` counts computed tokens from now on
    digests: list[bytes] | None = None  # its blocks' names in the prefix cache

    @property
    def remaining(self) -> int:
        return len(self.tokens) - self.done


def plan(jobs: list[PrefillJob], budget: int, long_budget: int) -> list[tuple[PrefillJob, int]]:
    """Jobs, in order, and their chunk lengths for one pass of at most ``budget`` new tokens,
    of which jobs of more than ``long_budget`` tokens (long prompts) share at most
    ``long_budget``: a short prompt goes whole, a long one a chunk a pass (vLLM's long prefill
    threshold), so a stream's step waits for one chunk of a long prompt, never for its whole
    prefill. The last job chosen may get only part of what it has left. A job that needs the
    logits of several positions (a replay with logprobs) is never cut: it waits for a pass of
    its own, where it may go past the budget."""
    chosen: list[tuple[PrefillJob, int]] = []
    left, long_left = budget, long_budget
    for job in jobs:
        long = len(job.tokens) > long_budget  # its last chunk too: it counts as a chunk
        take = min(job.remaining, left, long_left if long else left)
        if take <= 0:
            continue  # the long prompts' share is spent: short ones behind may still go
        if job.keep > 1 and take < job.remaining:
            if chosen:
                break
            take = job.remaining
        chosen.append((job, take))
        left -= take
        long_left -= take if long else 0
        if left <= 0:
            break
    return chosen


@torch.inference_mode()
def run(runner: Runner, chunks: list[tuple[PrefillJob, int]]) -> list[torch.Tensor | None]:
    """One forward pass over ``chunks``; each job's ``done`` and ``kv`` move on. Returns the
    logits ``[keep, V]`` of each job that finished its prompt (None for the others)."""
    layout = rows.layout(chunks) if len(chunks) > 1 else None
    if layout is not None:
        results = rows.forward(runner, chunks, layout)
    elif len(chunks) > 1 and padded.cheaper(chunks):
        results = padded.forward(runner, chunks)
    else:
        results = _packed(runner, chunks)
    for (job, take), (mine, _) in zip(chunks, results, strict=True):
        job.kv = _extend(job.kv, mine)
        job.done += take
    return [logits for _, logits in results]


def _packed(
    runner: Runner, chunks: list[tuple[PrefillJob, int]]
) -> list[tuple[KV, torch.Tensor | None]]:
    """The packed pass: each job's new cache, and the logits ``[keep, V]`` of each job that
    this pass finishes."""
    ends = torch.tensor([take for _, take in chunks]).cumsum(0).tolist()
    wanted = [
        list(range(end - job.keep, end)) if job.remaining == take else []
        for (job, take), end in zip(chunks, ends, strict=True)
    ]
    logits, new = _forward(runner, chunks, [i for want in wanted for i in want])
    results: list[tuple[KV, torch.Tensor | None]] = []
    at, start = 0, sum(job.done for job, _ in chunks)  # the new tokens' cache follows the pasts
    for (_, take), want in zip(chunks, wanted, strict=True):
        mine = [(k[:, :, start : start + take], v[:, :, start : start + take]) for k, v in new]
        results.append((mine, logits[at : at + len(want)] if want else None))
        at, start = at + len(want), start + take
    return results


def _forward(
    runner: Runner, chunks: list[tuple[PrefillJob, int]], rows: list[int]
) -> tuple[torch.Tensor, KV]:
    """One packed row: logits ``[len(rows), V]`` of the input positions ``rows``, and the
    whole cache (the pasts, then the new tokens)."""
    ids = [t for job, take in chunks for t in job.tokens[job.done : job.done + take]]
    positions = [p for job, take in chunks for p in range(job.done, job.done + take)]
    pasts = [job.kv for job, _ in chunks if job.kv is not None]
    past = (
        [
            (
                torch.cat([kv[layer][0] for kv in pasts], 2),
                torch.cat([kv[layer][1] for kv in pasts], 2),
            )
            for layer in range(len(pasts[0]))
        ]
        if pasts
        else []
    )
    keep: int | torch.Tensor = torch.tensor(rows, dtype=torch.long, device=runner.device)
    if len(chunks) == 1 and rows:
        keep = len(rows)  # the last positions: what an unbatched prefill computes
    mask = _mask(chunks, runner.dtype).to(runner.device) if len(chunks) > 1 else None
    out = runner.model(
        input_ids=torch.tensor([ids], dtype=torch.long, device=runner.device),
        position_ids=torch.tensor([positions], dtype=torch.long, device=runner.device),
        attention_mask=mask,
        past_key_values=make_cache(past),
        use_cache=True,
        **runner.keep_logits(keep),
    )
    logits = out.logits[0]
    if logits.shape[0] == len(ids):  # the model computed every position's logits
        logits = logits[rows]
    return logits.float().cpu(), cache_kv(out.past_key_values)


def _mask(chunks: list[tuple[PrefillJob, int]], dtype: torch.dtype) -> torch.Tensor:
    """The additive mask ``[1, 1, new, past + new]``: 0 where a token may look."""
    past = sum(job.done for job, _ in chunks)
    width = sum(take for _, take in chunks)
    allowed = torch.zeros(width, past + width, dtype=torch.bool)
    p = q = 0
    for job, take in chunks:
        allowed[q : q + take, p : p + job.done] = True  # its own past
        own = allowed[q : q + take, past + q : past + q + take]
        own.copy_(torch.ones(take, take, dtype=torch.bool).tril())
        p, q = p + job.done, q + take
    bias = torch.zeros(allowed.shape, dtype=dtype).masked_fill(~allowed, torch.finfo(dtype).min)
    return bias[None, None]


def _extend(kv: KV | None, new: KV) -> KV:
    """``kv`` with ``new`` after it. A first chunk stays a view of the pass's cache: the decode
    batch, the prefix cache and the next chunk all copy what they keep."""
    if kv is None:
        return new
    return [
        (torch.cat([k, nk], dim=2), torch.cat([v, nv], dim=2))
        for (k, v), (nk, nv) in zip(kv, new, strict=True)
    ]
