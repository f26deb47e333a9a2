"""Structured output on the built-in engine (the tiny example Llama): what a constrained
sequence writes always matches its constraint when it ends with a stop, greedy or sampled,
alone or beside others; unconstrained sequences beside it are untouched."""

from __future__ import annotations

import asyncio
import json
import math
import re
from collections.abc import Coroutine
from typing import Any, TypeVar

import jsonschema
import pytest

from rosettaserve.core.errors import InvalidInput, ModelError
from rosettaserve.core.generate import (
    Completion,
    FinishReason,
    GenerateRequest,
    SamplingParams,
    collect,
)
from rosettaserve.core.structured_output import (
    OutputConstraint,
    choice,
    grammar,
    json_object,
    json_schema,
    prepare_constraint,
    regex,
)
from rosettaserve.runtimes.llm import LlmModel
from rosettaserve.runtimes.llm import grammar as grammar_module
from rosettaserve.runtimes.llm.resume import Handoff, Resume

T = TypeVar("T")
SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 16},
        "age": {"type": "integer", "minimum": 0, "maximum": 150},
        "tags": {"type": "array", "items": {"enum": ["red", "green"]}, "maxItems": 3},
        "admin": {"type": "boolean"},
    },
    "required": ["name", "age", "tags", "admin"],
    "additionalProperties": False,
}
PATTERN = r"[a-z]{2,8}@[a-z]{2,6}\.(com|org)"
CHOICES = ["yes", "no", "maybe so"]
GBNF = 'root ::= item ("," item)*\nitem ::= "yes" | "no" | [0-9]{1,3}\n'
GBNF_AS_REGEX = r"(yes|no|[0-9]{1,3})(,(yes|no|[0-9]{1,3}))*"
PROMPTS = ["The quick brown", "Once upon a time", "Numbers are friends:"]


def run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coro)


def valid(c: OutputConstraint, text: str) -> bool:
    """Whether ``text`` is a sentence of ``c`` (each checked by a library other than the
    engine's)."""
    if c == CONSTRAINTS["json_schema"]:
        jsonschema.validate(json.loads(text), SCHEMA)
        return True
    if c == CONSTRAINTS["json_object"]:
        return isinstance(json.loads(text), dict)
    if c == CONSTRAINTS["regex"]:
        return re.fullmatch(PATTERN, text) is not None
    if c == CONSTRAINTS["choice"]:
        return text in CHOICES
    return re.fullmatch(GBNF_AS_REGEX, text) is not None


CONSTRAINTS = {
    "json_schema": json_schema(SCHEMA, "s"),
    "json_object": json_object(),
    "regex": regex(PATTERN, "r"),
    "choice": choice(CHOICES, "c"),
    "gbnf": grammar(GBNF, "g"),
}


def request(
    prompt: str, c: OutputConstraint | None, temperature: float = 0.0, n: int = 1, **kw: Any
) -> GenerateRequest:
    params = SamplingParams(max_new_tokens=120, temperature=temperature, constraint=c, **kw)
    return GenerateRequest(prompt=prompt, sampling=params, n=n)


async def generate(llm: LlmModel, req: GenerateRequest) -> list[Completion]:
    await prepare_constraint(llm, req.sampling.constraint)
    return await collect(llm.generate(req), req.n)


def assert_valid(c: OutputConstraint, done: Completion) -> None:
    assert done.finish_reason in (FinishReason.EOS, FinishReason.STOP), done
    assert valid(c, done.text), done.text


@pytest.mark.parametrize("kind", list(CONSTRAINTS))
def test_greedy_output_always_matches(llm: LlmModel, kind: str) -> None:
    """Every bounded constraint ends within the token limit; any JSON object may go on (a
    tiny model writes a long key), and matches whenever it stops."""
    c = CONSTRAINTS[kind]
    ended = 0
    for prompt in PROMPTS:
        (done,) = run(generate(llm, request(prompt, c)))
        if kind != "json_object" or done.finish_reason is not FinishReason.LENGTH:
            assert_valid(c, done)
            ended += 1
    assert ended >= 1


@pytest.mark.parametrize("kind", list(CONSTRAINTS))
def test_sampled_output_always_matches_and_a_seed_repeats(llm: LlmModel, kind: str) -> None:
    c = CONSTRAINTS[kind]
    for seed in range(3):
        req = request(PROMPTS[seed], c, temperature=1.0, n=2, seed=seed, top_p=0.95)
        first = run(generate(llm, req))
        for done in first:
            if done.finish_reason is not FinishReason.LENGTH:  # only a stop promises a match
                assert_valid(c, done)
        again = run(generate(llm, request(PROMPTS[seed], c, 1.0, 2, seed=seed, top_p=0.95)))
        assert [d.text for d in again] == [d.text for d in first]


def test_penalties_still_apply_under_a_constraint(llm: LlmModel) -> None:
    c = CONSTRAINTS["gbnf"]
    (plain,) = run(generate(llm, request("Numbers are friends:", c)))
    (penalized,) = run(generate(llm, request("Numbers are friends:", c, repetition_penalty=5.0)))
    assert_valid(c, penalized)
    assert penalized.text != plain.text


def test_a_grammar_that_ended_finishes_the_sequence_even_when_eos_is_ignored(
    llm: LlmModel,
) -> None:
    c = CONSTRAINTS["choice"]
    (done,) = run(generate(llm, request("The quick brown", c, ignore_eos=True)))
    assert done.finish_reason is FinishReason.STOP
    assert done.text in CHOICES


def test_unconstrained_sequences_beside_constrained_ones_are_what_they_are_alone(
    llm: LlmModel,
) -> None:
    alone = [run(generate(llm, request(p, None)))[0].text for p in PROMPTS]

    async def mixed() -> list[list[Completion]]:
        reqs = [request(p, None) for p in PROMPTS]
        reqs += [request(p, c) for p, c in PAIRS]
        for req in reqs:
            await prepare_constraint(llm, req.sampling.constraint)
        return await asyncio.gather(*(collect(llm.generate(r)) for r in reqs))

    results = run(mixed())
    assert [r[0].text for r in results[: len(PROMPTS)]] == alone
    for (done,), (p, c) in zip(results[len(PROMPTS) :], PAIRS, strict=True):
        assert done.text == run(generate(llm, request(p, c)))[0].text
        if done.finish_reason is not FinishReason.LENGTH:
            assert_valid(c, done)


PAIRS = [(p, c) for p in PROMPTS for c in CONSTRAINTS.values()]


def test_a_resumed_sequence_replays_its_tokens_into_a_fresh_matcher(llm: LlmModel) -> None:
    """As a prefill instance hands over after the first token, and after a preemption: the
    rest is what one run writes."""
    c = CONSTRAINTS["json_schema"]
    req = request("Once upon a time", c)
    (whole,) = run(generate(llm, req))
    engine = llm.engine
    ids = engine.prompt_ids(req)

    async def handed_over() -> list[int]:
        handoff = Handoff()
        first = await engine.submit(req, ids, Resume(handoff=handoff, emit_prior=True)).__anext__()
        resume = Resume(first.token_ids, handoff.kv, handoff.seed, handoff.sampler_state)
        rest = await collect(engine.submit(req, ids, resume))
        return first.token_ids + rest[0].token_ids

    assert run(handed_over()) == whole.token_ids
    k = len(whole.token_ids) // 2

    async def resumed() -> list[Completion]:
        return await collect(engine.resume(req, ids, whole.token_ids[:k], emit_prior=False))

    (rest,) = run(resumed())
    assert whole.token_ids[:k] + rest.token_ids == whole.token_ids


def test_what_cannot_compile_is_a_400_naming_the_problem(llm: LlmModel) -> None:
    cases = [
        (regex("(ab", "r"), "the regular expression cannot be compiled: Regex parsing error"),
        (grammar("root ::= foo", "g"), "the grammar (GBNF) cannot be compiled: EBNF parser"),
        (json_schema({"type": "nonsense"}, "s"), "the JSON schema cannot be compiled:"),
    ]
    for c, message in cases:
        with pytest.raises(InvalidInput) as caught:
            run(prepare_constraint(llm, c))
        assert caught.value.message.startswith(message), caught.value.message
        assert "nonsense" in caught.value.message or c.kind.value != "json_schema"


def test_compiled_grammars_are_cached_and_the_oldest_goes_first(
    llm: LlmModel, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(grammar_module, "CACHE_ENTRIES", 2)
    grammars = llm.engine.grammars
    a, b, c = (regex(p, "r") for p in ("a+", "b+", "c+"))
    for constraint in (a, b):
        run(prepare_constraint(llm, constraint))
    assert grammars.ready(a)
    assert grammars.ready(b)
    run(prepare_constraint(llm, a))  # used: b is now the oldest
    run(prepare_constraint(llm, c))
    assert grammars.ready(a)
    assert grammars.ready(c)
    assert not grammars.ready(b)


class Refusing(grammar_module.Matcher):
    def accept(self, token: int) -> bool:
        return False


def test_a_failing_matcher_fails_only_its_request(
    llm: LlmModel, monkeypatch: pytest.MonkeyPatch
) -> None:
    bad = regex("z+", "r")
    made = grammar_module.Grammars.matcher

    def matcher(self: grammar_module.Grammars, c: OutputConstraint) -> grammar_module.Matcher:
        m = made(self, c)
        return Refusing(m._m) if c == bad else m

    monkeypatch.setattr(grammar_module.Grammars, "matcher", matcher)
    alone = run(generate(llm, request("The quick brown", None)))[0].text

    async def both() -> tuple[BaseException | list[Completion], ...]:
        await prepare_constraint(llm, bad)
        failing = collect(llm.generate(request("Once upon a time", bad)))
        fine = collect(llm.generate(request("The quick brown", None)))
        return tuple(await asyncio.gather(failing, fine, return_exceptions=True))

    failed, fine = run(both())
    assert isinstance(failed, ModelError)
    assert "the grammar refused token" in failed.message
    assert isinstance(fine, list)
    assert fine[0].text == alone


def test_logprobs_are_the_masked_distributions_with_vllms_floor(llm: LlmModel) -> None:
    c = CONSTRAINTS["choice"]
    req = request("The quick brown", c, logprobs=True, top_logprobs=5)
    (done,) = run(generate(llm, req))
    first = done.logprobs[0]
    allowed = {"yes", "no", "maybe so"}
    finite = [t for t in first.top if t.logprob > -9999.0]
    assert finite  # the allowed first tokens, with the whole probability between them
    assert all(any(a.startswith(t.token) for a in allowed) for t in finite)
    assert all(t.logprob == -9999.0 for t in first.top if t not in finite)
    assert abs(sum(math.exp(t.logprob) for t in finite) - 1.0) < 1e-4
