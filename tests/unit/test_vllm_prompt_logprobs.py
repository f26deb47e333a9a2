"""vLLM's prompt logprobs (runtime: vllm) reach the client as vLLM's OpenAI server sends them:
the engine's output read with stand-ins for vLLM's objects (vLLM itself is tested in
tests_vllm), gathered by the plane, rendered in completions and chat replies."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from rosettaserve.core.generate import Completion, GeneratorInfo, SamplingParams, Usage
from rosettaserve.protocols.openai import convert
from rosettaserve.runtimes.vllm.stream import VllmStream
from tests.unit.vllm_outputs import Output, Sequence


@dataclass
class Logprob:  # vllm.logprobs.Logprob
    logprob: float
    rank: int | None
    decoded_token: str | None


@dataclass
class Stats:
    tokens: int = 0


@dataclass
class Engine:
    info: GeneratorInfo = field(
        default_factory=lambda: GeneratorInfo("m", 64, 2, 2, 0, 4, "float32", "cpu")
    )
    stats: Stats = field(default_factory=Stats)


# the prompt "A B C" as token ids 7, 8, 9; each place: the token and its top alternative
PROMPT = [
    None,
    {8: Logprob(-1.5, 2, " B"), 3: Logprob(-0.5, 1, " x")},
    {9: Logprob(-0.25, 1, " C")},
]
RENDERED = [
    None,
    {
        "8": {"logprob": -1.5, "rank": 2, "decoded_token": " B"},
        "3": {"logprob": -0.5, "rank": 1, "decoded_token": " x"},
    },
    {"9": {"logprob": -0.25, "rank": 1, "decoded_token": " C"}},
]


def completions(outputs: list[Output], n: int) -> list[Completion]:
    stream = VllmStream(Engine(), None, "r", 3, SamplingParams(prompt_logprobs=1), n=n)  # type: ignore[arg-type]
    gathered = [Completion(i) for i in range(n)]
    for out in outputs:
        for delta in stream.deltas(out):
            gathered[delta.index].add(delta)
    return gathered


@pytest.mark.parametrize("n", [1, 2])
def test_prompt_logprobs_come_once_and_every_choice_shows_them(n: int) -> None:
    first = Output([Sequence(i, "x", [5]) for i in range(n)], prompt_logprobs=PROMPT)
    last = Output([Sequence(i, "y", [6], "length") for i in range(n)])
    done = completions([first, last], n)
    assert sum(c.prompt_logprobs is not None for c in done) == 1  # carried by one delta
    reply = convert.Reply("text", "m")
    body = convert.text_completion(reply, done, Usage(3, 2 * n), False, "")
    assert [c["prompt_logprobs"] for c in body["choices"]] == [RENDERED] * n
    assert [c["text"] for c in body["choices"]] == ["xy"] * n
    chat = convert.chat_completion(convert.Reply("chat", "m"), done, Usage(3, 2 * n), False)
    assert chat["prompt_logprobs"] == RENDERED
    assert all("prompt_logprobs" not in c for c in chat["choices"])


def test_a_first_output_without_tokens_still_hands_the_prompt_logprobs_on() -> None:
    empty = Output([Sequence(0, "", [])], prompt_logprobs=PROMPT)
    done = completions([empty, Output([Sequence(0, "z", [5], "length")])], 1)
    assert convert.prompt_logprobs(done) == RENDERED


def test_replies_without_prompt_logprobs_have_no_such_key() -> None:
    done = [Completion(0, "x", finish_reason=None)]
    assert (
        "prompt_logprobs"
        not in convert.text_completion(convert.Reply("text", "m"), done, Usage(1, 1), False, "")[
            "choices"
        ][0]
    )
    assert "prompt_logprobs" not in convert.chat_completion(
        convert.Reply("chat", "m"), done, Usage(1, 1), False
    )
