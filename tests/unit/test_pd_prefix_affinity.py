"""The prefill instance chosen by prompt prefix (pd/prefix_affinity.py): the turns of one
conversation share their blocks, a conversation goes back where its prefix was prefilled unless
that instance is busier than the prefix is worth, and with nothing cached the least loaded wins."""

from __future__ import annotations

from dataclasses import dataclass

import orjson

from rosettaserve.pd.prefix_affinity import BLOCK, PrefixTable, prompt_blocks

CHAT = "/v1/chat/completions"


@dataclass
class Node:
    url: str
    outstanding: int = 0


def chat(*turns: str) -> bytes:
    messages = [{"role": "system", "content": "You are terse. " * 40}]
    messages += [{"role": "user" if i % 2 == 0 else "assistant", "content": t}
                 for i, t in enumerate(turns)]  # fmt: skip
    return orjson.dumps({"model": "m", "messages": messages})


def test_the_turns_of_a_conversation_share_their_leading_blocks() -> None:
    first = prompt_blocks(CHAT, chat("Tell me about cats. " * 20))
    second = prompt_blocks(CHAT, chat("Tell me about cats. " * 20, "Cats purr. " * 30, "More?"))
    assert len(first) >= 3
    assert second[: len(first) - 1] == first[: len(first) - 1]
    other = prompt_blocks(CHAT, chat("Tell me about dogs. " * 20))
    assert other[0] == first[0]  # the same system prompt
    assert other[2:] != first[2:]
    completion = prompt_blocks("/v1/completions", orjson.dumps({"prompt": "x" * (3 * BLOCK)}))
    assert len(completion) == 3
    assert prompt_blocks(CHAT, b"not json") == []


def test_a_conversation_goes_back_where_its_prefix_is_unless_that_is_busier() -> None:
    table, a, b = PrefixTable(), Node("a"), Node("b")
    turn1 = prompt_blocks(CHAT, chat("Tell me about cats. " * 20))
    first = table.choose([a, b], turn1)
    assert first is a  # nothing cached: the least loaded, ties in the given order
    table.remember(turn1, first.url)
    turn2 = prompt_blocks(CHAT, chat("Tell me about cats. " * 20, "Cats purr.", "More?"))
    a.outstanding = 1000  # a is busier, by less than the prefix it holds
    assert table.choose([a, b], turn2) is a
    shared = len(turn1) if turn2[: len(turn1)] == turn1 else 0
    assert shared
    assert (table.hits, table.matched_chars) == (1, shared * BLOCK)
    a.outstanding = 100_000  # far busier than the prefix is worth
    assert table.choose([a, b], turn2) is b


def test_the_table_forgets_the_least_recently_used_first() -> None:
    table, a = PrefixTable(max_entries=3), Node("a")
    old = prompt_blocks("/v1/completions", orjson.dumps({"prompt": "o" * (3 * BLOCK)}))
    new = prompt_blocks("/v1/completions", orjson.dumps({"prompt": "n" * (3 * BLOCK)}))
    table.remember(old, "a")
    table.remember(new, "a")
    assert table.matched(old) == {}
    assert table.matched(new) == {"a": 3 * BLOCK}
    assert table.choose([Node("b"), a], new) is a
