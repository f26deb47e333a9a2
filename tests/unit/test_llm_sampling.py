"""Logit processing: penalties, top-k/top-p filtering, per-sequence generators, and rows that
cannot be sampled failing alone."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch

from rosettaserve.core.generate import SamplingParams
from rosettaserve.core.sampling_fields import GREEDY_BELOW, REPETITION_PENALTY_MIN
from rosettaserve.runtimes.llm import sampling
from rosettaserve.runtimes.llm.sampling import (
    TokenState,
    choose,
    logprobs,
    penalize,
    probabilities,
    sample_row,
)

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
    assert choose(logits, [plain, plain]) == ([1, 0], {})
    assert choose(logits, [penalized, plain]) == ([2, 0], {})


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
    together, _ = choose(batch, [sampler(1), sampler(2), sampler(3)])
    alone = [choose(row.unsqueeze(0), [sampler(s)])[0][0] for s in (1, 2, 3)]
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


# -- extreme values and rows that cannot be sampled ------------------------------------------------

BIG = torch.tensor([1000.0, -1000.0, 999.0, 0.0, -3.0, 500.0])  # logits far apart


def test_the_smallest_sampled_temperature_gives_a_finite_distribution() -> None:
    probs = probabilities(BIG, sampler(1, temperature=GREEDY_BELOW))
    assert bool(torch.isfinite(probs).all())
    assert probs.tolist() == [1.0, 0.0, 0.0, 0.0, 0.0, 0.0]  # 1e3 apart at 1e-5: 1e8 apart


def test_top_p_below_float32s_smallest_number_keeps_the_top_token() -> None:
    for top_p in (5e-324, 1e-300, 1e-45):
        assert {sample_row(BIG, sampler(s, top_p=top_p)) for s in range(20)} == {0}


def test_the_smallest_repetition_penalty_keeps_logits_finite() -> None:
    s = sampler(1, repetition_penalty=REPETITION_PENALTY_MIN)
    s.seen = torch.ones(VOCAB, dtype=torch.bool)
    row = penalize(BIG, s)
    assert bool(torch.isfinite(row).all())
    assert bool(torch.isfinite(probabilities(row, s)).all())


def rows_alone(logits: torch.Tensor, make: list[Callable[[], TokenState]]) -> list[int]:
    return [choose(logits[i : i + 1], [m()])[0][0] for i, m in enumerate(make)]


@pytest.mark.parametrize(
    "poison",
    [float("nan"), float("inf")],
    ids=["nan", "inf"],
)
def test_a_row_that_cannot_be_sampled_fails_alone(poison: float) -> None:
    rng = torch.Generator().manual_seed(5)
    logits = torch.randn(4, VOCAB, generator=rng)
    logits[2, 3] = poison
    logits[3] = float("-inf")  # no token at all
    make = [lambda: state([]), lambda: sampler(7), lambda: sampler(8), lambda: sampler(9)]
    tokens, failed = choose(logits, [m() for m in make])
    assert sorted(failed) == [2, 3]
    assert all(isinstance(e, RuntimeError) for e in failed.values())
    assert tokens[:2] == rows_alone(logits[:2], make[:2])


def test_a_greedy_batch_takes_the_argmax_of_all_rows_at_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def row_by_row(*args: object) -> None:
        raise AssertionError("a greedy batch went row by row")

    monkeypatch.setattr(sampling, "penalize", row_by_row)
    monkeypatch.setattr(sampling, "sample_row", row_by_row)
    logits = torch.tensor([[0.0, float("nan"), 1.0, 0.0, 0.0, 0.0], [5.0, 0.0, 0.0, 0.0, 0.0, 1.0]])
    assert choose(logits, [state([]), state([])]) == ([1, 0], {})  # argmax takes NaN as largest
