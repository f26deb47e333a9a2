"""Batched and chunked prefill: the prompts being prefilled, and one forward pass over them.

A prompt being prefilled is a ``PrefillJob``: its tokens, how many of them already have their
KV cache (from the prefix cache or from earlier chunks), and that cache. Each engine step runs
at most one prefill forward pass of at most ``budget`` tokens, padding included (``plan``), then
a decode step: a long prompt is prefilled a chunk per step, interleaved with the decode steps of
the running sequences, and prompts that arrive together share passes.

In that pass the rows are left-padded twice: their past (the cached part) to the longest past,
their new tokens to the longest chunk. An additive 4-D mask lets each real token see its own
past and its own earlier new tokens; position ids count from each row's own past length. A pass
with one row and no padding runs without a mask, exactly as an unbatched prefill does.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

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


def plan(jobs: list[PrefillJob], budget: int) -> list[tuple[PrefillJob, int]]:
    """The first jobs and their chunk lengths for one pass of at most ``budget`` tokens,
    padding included (rows x longest chunk). With ``k`` rows each chunk is at most
    ``budget // k`` tokens; the ``k`` chosen finishes the most prompts (their first tokens
    leave after this pass), then computes the most tokens. A job that needs the logits of
    several positions (a replay with logprobs) is never cut, so it may go alone past the budget.
    """
    best: list[tuple[PrefillJob, int]] = []
    score = (-1, -1)
    for k in range(1, min(len(jobs), budget) + 1):
        width = budget // k
        takes = [min(job.remaining, width) for job in jobs[:k]]
        uncut = [job.keep == 1 or t == job.remaining for job, t in zip(jobs, takes, strict=False)]
        if not all(uncut):
            if k > 1:
                break  # more rows only narrow the chunks further
            takes = [jobs[0].remaining]
        finished = sum(t == job.remaining for job, t in zip(jobs, takes, strict=False))
        if (finished, sum(takes)) > score:
            score, best = (finished, sum(takes)), list(zip(jobs, takes, strict=False))
    return best


@torch.inference_mode()
def run(runner: Runner, chunks: list[tuple[PrefillJob, int]]) -> list[torch.Tensor | None]:
    """One forward pass over ``chunks``; each job's ``done`` and ``kv`` move on. Returns the
    logits ``[keep, V]`` of each job that finished its prompt (None for the others)."""
    logits, new = _forward(runner, chunks)
    out: list[torch.Tensor | None] = []
    for row, (job, take) in enumerate(chunks):
        mine = [(k[row : row + 1, :, -take:], v[row : row + 1, :, -take:]) for k, v in new]
        job.kv = _extend(job.kv, mine)
        job.done += take
        out.append(logits[row, -job.keep :] if job.remaining == 0 else None)
    return out


def _forward(runner: Runner, chunks: list[tuple[PrefillJob, int]]) -> tuple[torch.Tensor, KV]:
    past = max(job.done for job, _ in chunks)
    width = max(take for _, take in chunks)
    rows = len(chunks)
    ids = torch.zeros(rows, width, dtype=torch.long)
    positions = torch.zeros(rows, width, dtype=torch.long)
    for row, (job, take) in enumerate(chunks):
        ids[row, width - take :] = torch.tensor(job.tokens[job.done : job.done + take])
        positions[row, width - take :] = torch.arange(job.done, job.done + take)
    # one row has no padding: the model's own causal mask, as without batching
    mask = _mask(chunks, past, width, runner.dtype).to(runner.device) if rows > 1 else None
    cache = make_cache(_stack_past(chunks, past) if past else [])
    out = runner.model(
        input_ids=ids.to(runner.device),
        position_ids=positions.to(runner.device),
        attention_mask=mask,
        past_key_values=cache,
        use_cache=True,
        **runner.keep_logits(max(job.keep for job, _ in chunks)),
    )
    return out.logits.float().cpu(), cache_kv(out.past_key_values)


def _mask(
    chunks: list[tuple[PrefillJob, int]], past: int, width: int, dtype: torch.dtype
) -> torch.Tensor:
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


def _stack_past(chunks: list[tuple[PrefillJob, int]], past: int) -> KV:
    """The rows' cached KV, left-padded to ``past`` tokens and stacked."""
    first = next(job.kv for job, _ in chunks if job.kv is not None)
    layers = []
    for layer, (k0, v0) in enumerate(first):
        keys, values = [], []
        for job, _ in chunks:
            if job.kv is None:
                shape = (1, k0.shape[1], past, k0.shape[3])
                keys.append(k0.new_zeros(shape))
                values.append(v0.new_zeros((1, v0.shape[1], past, v0.shape[3])))
            else:
                k, v = job.kv[layer]
                keys.append(F.pad(k, (0, 0, past - k.shape[2], 0)))
                values.append(F.pad(v, (0, 0, past - v.shape[2], 0)))
        layers.append((torch.cat(keys), torch.cat(values)))
    return layers


def _extend(kv: KV | None, new: KV) -> KV:
    if kv is None:
        return [(k.contiguous(), v.contiguous()) for k, v in new]
    return [
        (torch.cat([k, nk], dim=2), torch.cat([v, nv], dim=2))
        for (k, v), (nk, nv) in zip(kv, new, strict=True)
    ]
