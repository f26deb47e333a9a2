"""Logit processing: penalties, top-k/top-p filtering, per-sequence generators."""

from __future__ import annotations

import pytest
import torch

from rosettaserve.core.generate import SamplingParams
from rosettaserve.runtimes.llm.sampling import TokenState, choose, logprobs, penalize, sample_row

VOCAB = 6


def state(prompt: list[int], **kw: float) -> TokenState:
    return TokenState.create(SamplingParams(temperature=0.0, **kw), 0, prompt, VOCAB)  # type: ignore[arg-type]


def test_repetition_penalty_divides_positive_and_multiplies_negative_logits() -> None:
    s = state([1, 2], repetition_penalty=2.0)
    row = torch.tensor([1.0, 4.0, -2.0, 3.0, -1.0, 0.5])
    assert penalize(row, s).tolist() == [1.0, 2.0, -4.0, 3.0, -1.0, 0.5]
    s.record(3)
    assert penalize(row, s).tolist() == [1.0, 2.0, -4.0, 1.5, -1.0, 0.5]


def test_presence_and_frequency_penalties_follow_openai() -> None:
    s = state([0], presence_penalty=0.5, frequency_penalty=0.25)
    for token in (4, 4, 1):
        s.record(token)
    row = torch.zeros(VOCAB)
    # token 4: twice -> 0.5 + 2 * 0.25; token 1: once -> 0.5 + 0.25; the prompt's 0 is untouched
    assert penalize(row, s).tolist() == [0.0, -0.75, 0.0, 0.0, -1.0, 0.0]


def test_greedy_rows_take_the_argmax_after_penalties() -> None:
    logits = torch.tensor([[0.0, 3.0, 2.9, 0.0, 0.0, 0.0], [5.0, 0.0, 0.0, 0.0, 0.0, 1.0]])
    plain, penalized = state([]), state([1], repetition_penalty=1.5)
    assert choose(logits, [plain, plain]) == [1, 0]
    assert choose(logits, [penalized, plain]) == [2, 0]


def sampler(seed: int, **kw: float) -> TokenState:
    params = SamplingParams(temperature=kw.pop("temperature", 1.0), seed=seed, **kw)  # type: ignore[arg-type]
    return TokenState.create(params, seed, [], VOCAB)


def test_top_k_and_top_p_keep_only_the_likely_tokens() -> None:
    row = torch.log(torch.tensor([0.5, 0.3, 0.1, 0.05, 0.03, 0.02]))
    top_k = {sample_row(row, sampler(s, top_k=2)) for s in range(200)}
    assert top_k == {0, 1}
    top_p = {sample_row(row, sampler(s, top_p=0.85)) for s in range(200)}
    assert top_p == {0, 1, 2}  # 0.5 + 0.3 < 0.85, so the third is needed; the rest are cut
    wide = {sample_row(row, sampler(s)) for s in range(400)}
    assert wide == set(range(VOCAB))


def test_each_sequence_draws_from_its_own_generator() -> None:
    row = torch.zeros(VOCAB)
    batch = torch.stack([row, row, row])
    together = choose(batch, [sampler(1), sampler(2), sampler(3)])
    alone = [choose(row.unsqueeze(0), [sampler(s)])[0] for s in (1, 2, 3)]
    assert together == alone
    a, b = sampler(9), sampler(9)
    assert [sample_row(row, a) for _ in range(20)] == [sample_row(row, b) for _ in range(20)]


def test_logprobs_are_the_models_log_softmax() -> None:
    logits = torch.tensor([[1.0, 2.0, 3.0, 0.0, 0.0, 0.0]])
    (lp,) = logprobs(logits, [2], [2])
    assert lp is not None
    expected = torch.log_softmax(logits[0], dim=-1)
    assert lp.chosen == pytest.approx(float(expected[2]))
    assert [t for t, _ in lp.top] == [2, 1]
    assert logprobs(logits, [2], [None]) == [None]
