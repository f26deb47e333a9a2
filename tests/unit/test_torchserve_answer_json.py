"""A handler's answer is written as TorchServe's worker writes it, json.dumps(indent=2), byte for
byte, whether the fast path for lists of numbers or json.dumps itself writes it."""

from __future__ import annotations

import json
import random
from typing import Any

import numpy as np
import pytest

from rosettaserve.runtimes.torchserve.answer_json import MAX_DEPTH, indented

SPECIAL = [float("nan"), float("inf"), -float("inf"), -0.0, 0.0, 1e-7, 1e22, 5e-324, 2.0**63]


def nested(rng: random.Random, depth: int) -> list[Any]:
    items: list[Any] = []
    for _ in range(rng.randrange(0, 5)):
        pick = rng.randrange(6)
        if pick == 0 and depth < 4:
            items.append(nested(rng, depth + 1))
        elif pick == 1:
            items.append(rng.choice(SPECIAL))
        elif pick == 2:
            items.append(rng.randrange(-(10**30), 10**30))
        else:
            items.append(rng.uniform(-1e6, 1e6))
    return items


def test_lists_of_numbers_are_written_as_json_writes_them() -> None:
    rng = random.Random(7)
    for _ in range(2000):
        value = nested(rng, 0)
        assert indented(value) == json.dumps(value, indent=2).encode()


@pytest.mark.parametrize(
    "value",
    [
        [[0.12, 0.88]],
        [],
        [[]],
        [True, 1.5],  # a bool: json's true, not the int's 1
        [1, "cat", None],
        {"label": [0.5, 2]},
        [(1, 2)],  # a tuple: written as a list
        [np.float64(0.25)],  # a float subclass
        "text",
        3.5,
        [[[[[[[[[1]]]]]]]]],
    ],
)
def test_other_values_are_written_as_json_writes_them(value: Any) -> None:
    assert indented(value) == json.dumps(value, indent=2).encode()


def test_deep_lists_and_a_list_holding_itself_fail_as_json_fails() -> None:
    deep: list[Any] = [1.0]
    for _ in range(MAX_DEPTH + 5):
        deep = [deep]
    assert indented(deep) == json.dumps(deep, indent=2).encode()
    loop: list[Any] = [1.0]
    loop.append(loop)
    with pytest.raises(ValueError, match="Circular"):
        indented(loop)


def test_what_json_cannot_write_raises_its_type_error() -> None:
    with pytest.raises(TypeError):
        indented([object()])
