"""Next-token choice for a batch: penalties, temperature, top-k, top-p, per-request generators.

Every random draw uses the sequence's own ``torch.Generator``, seeded from the request, so a
sequence draws the same numbers whether it runs alone or among others. A row whose sampling
fails (logits that are not numbers: a model's NaN or infinity) fails alone: ``choose`` reports
it and the other rows' tokens are the ones they would have alone.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from rosettaserve.core.generate import SamplingParams


@dataclass(slots=True)
class TokenState:
    """What one sequence's sampling needs to remember between steps."""

    params: SamplingParams
    generator: torch.Generator | None
    seen: torch.Tensor | None = None  # bool [V]: prompt and output tokens (repetition penalty)
    counts: torch.Tensor | None = None  # float [V]: output token counts (presence/frequency)

    @classmethod
    def create(
        cls, params: SamplingParams, seed: int, prompt_ids: list[int], vocab: int
    ) -> TokenState:
        generator = None if params.greedy else torch.Generator().manual_seed(seed)
        state = cls(params, generator)
        if params.repetition_penalty != 1.0:
            state.seen = torch.zeros(vocab, dtype=torch.bool)
            state.seen[torch.tensor(prompt_ids, dtype=torch.long)] = True
        if params.presence_penalty or params.frequency_penalty:
            state.counts = torch.zeros(vocab, dtype=torch.float32)
        return state

    @property
    def penalized(self) -> bool:
        return self.seen is not None or self.counts is not None

    def record(self, token_id: int) -> None:
        if self.seen is not None:
            self.seen[token_id] = True
        if self.counts is not None:
            self.counts[token_id] += 1.0


def penalize(row: torch.Tensor, state: TokenState) -> torch.Tensor:
    """Repetition penalty (divide positive logits, multiply negative ones), then OpenAI's
    presence and frequency penalties over the output so far."""
    p = state.params
    if state.seen is not None:
        scaled = torch.where(row > 0, row / p.repetition_penalty, row * p.repetition_penalty)
        row = torch.where(state.seen, scaled, row)
    if state.counts is not None:
        row = row - p.frequency_penalty * state.counts - p.presence_penalty * (state.counts > 0)
    return row


def sample_row(row: torch.Tensor, state: TokenState) -> int:
    """A token drawn from the row's distribution; raises (RuntimeError) when the row holds no
    distribution (NaN, or +inf from the model)."""
    return int(torch.multinomial(probabilities(row, state), 1, generator=state.generator))


def probabilities(row: torch.Tensor, state: TokenState) -> torch.Tensor:
    """The distribution a sampled row (penalties already applied) draws from: temperature,
    then top-k, then top-p."""
    p = state.params
    if p.temperature != 1.0:
        # the largest logit becomes 0 first: dividing by a small temperature cannot overflow
        # (the others may reach -inf, which leaves them out)
        row = (row - row.max()) / p.temperature
    if 0 < p.top_k < row.shape[-1]:
        kth = torch.topk(row, p.top_k).values[-1]
        row = row.masked_fill(row < kth, float("-inf"))
    if p.top_p < 1.0:
        ordered, order = torch.sort(row, descending=True)
        probs = torch.softmax(ordered, dim=-1)
        # drop a token when the tokens before it already reach top_p; the most likely one always
        # stays, also when top_p is below float32's smallest number (it compares as 0 there)
        drop = (torch.cumsum(probs, dim=-1) - probs) >= p.top_p
        drop[0] = False
        row = row.scatter(0, order, ordered.masked_fill(drop, float("-inf")))
    return torch.softmax(row, dim=-1)


def choose(
    logits: torch.Tensor, states: list[TokenState]
) -> tuple[list[int], dict[int, Exception]]:
    """One token per row of ``logits`` [B, V], and the rows whose sampling failed, with why
    (their token is a placeholder, 0): the other rows are not touched by a failed one."""
    if not any(s.penalized or not s.params.greedy for s in states):
        return [int(t) for t in logits.argmax(dim=-1).tolist()], {}
    tokens = []
    failed: dict[int, Exception] = {}
    for i, (raw, state) in enumerate(zip(logits, states, strict=True)):
        try:
            row = penalize(raw, state) if state.penalized else raw
            tokens.append(int(row.argmax()) if state.params.greedy else sample_row(row, state))
        except Exception as exc:
            failed[i] = exc
            tokens.append(0)
    return tokens, failed


# The least logprob answered: a token a grammar refused (-inf) is answered with it, as vLLM's
# OpenAI server answers it (JSON has no infinity).
LOGPROB_FLOOR = -9999.0


@dataclass(frozen=True, slots=True)
class Logprobs:
    chosen: float
    top: list[tuple[int, float]]


def logprobs(
    logits: torch.Tensor, tokens: list[int], want: list[int | None]
) -> list[Logprobs | None]:
    """The model's log-probabilities (before penalties and temperature; after a grammar's
    mask, as vLLM's) of the chosen tokens, and the ``k`` most likely alternatives, for the rows
    with ``want[i] = k`` (None: skip)."""
    rows = [i for i, k in enumerate(want) if k is not None]
    out: list[Logprobs | None] = [None] * len(tokens)
    if not rows:
        return out
    lp = torch.log_softmax(logits[rows].float(), dim=-1).clamp_(min=LOGPROB_FLOOR)
    for j, i in enumerate(rows):
        k = want[i] or 0
        top = torch.topk(lp[j], k) if k else None
        pairs = list(zip(top.indices.tolist(), top.values.tolist(), strict=True)) if top else []
        out[i] = Logprobs(float(lp[j, tokens[i]]), pairs)
    return out
