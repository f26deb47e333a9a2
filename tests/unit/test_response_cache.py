"""The response cache (scheduling/response_cache.py): keys compared whole, the byte bound, copies
that a model's later writes cannot reach, and the statistics of hits and misses."""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np
import pytest

from rosettaserve.core.call import Call
from rosettaserve.core.registry import ModelVersion
from rosettaserve.scheduling.response_cache import (
    ENTRY_OVERHEAD,
    CachedInvoker,
    Entry,
    Key,
    ResponseCache,
    Scope,
    frozen,
    kept_entry,
    request_key,
)


class Counting:
    """An invoker whose answer is its inputs doubled, and that counts its calls."""

    streams = False
    waiting = None

    def __init__(self) -> None:
        self.calls = 0
        self.last: dict[str, np.ndarray] = {}

    async def predict(self, inputs: Any, parameters: Any, call: Call | None = None) -> Any:
        self.calls += 1
        self.last = {"OUT": inputs["X"] * 2}
        return self.last

    def stream(self, inputs: Any, parameters: Any, call: Call | None = None) -> Any:
        raise AssertionError("not a streaming model")


def cached(capacity: int = 1 << 20) -> tuple[CachedInvoker, Counting, ModelVersion]:
    mv = ModelVersion("m", "1", "python")
    inner = Counting()
    return CachedInvoker(inner, ResponseCache(capacity), mv), inner, mv


def run(invoker: CachedInvoker, x: np.ndarray, parameters: Any = None) -> tuple[Any, Call]:
    call = Call(1)
    answer = asyncio.run(invoker.predict({"X": x}, parameters or {}, call))
    return answer, call


def test_a_repeated_request_is_answered_without_the_model() -> None:
    invoker, inner, mv = cached()
    first, call = run(invoker, np.arange(4, dtype=np.float32))
    assert call.cache_hit_ns == 0
    assert inner.calls == 1
    second, call = run(invoker, np.arange(4, dtype=np.float32))
    assert call.cache_hit_ns > 0
    assert inner.calls == 1
    assert second["OUT"].tobytes() == first["OUT"].tobytes()
    assert mv.stats.cache_miss.count == 1
    assert mv.stats.cache_miss.ns > 0


@pytest.mark.parametrize(
    "other",
    [
        np.arange(4, dtype=np.int32),  # same values, another dtype
        np.arange(4, dtype=np.float32).reshape(2, 2),  # same bytes, another shape
        np.array([0, 1, 2, 4], dtype=np.float32),  # one value differs
    ],
)
def test_inputs_that_differ_in_any_way_miss(other: np.ndarray) -> None:
    invoker, inner, _ = cached()
    run(invoker, np.arange(4, dtype=np.float32))
    _, call = run(invoker, other)
    assert call.cache_hit_ns == 0
    assert inner.calls == 2


def test_parameters_are_part_of_the_key_with_their_types() -> None:
    invoker, inner, _ = cached()
    x = np.arange(3, dtype=np.int64)
    for value in (1, 1.0, True, "1"):
        run(invoker, x, {"k": value})
    assert inner.calls == 4
    run(invoker, x, {"k": 1.0})
    assert inner.calls == 4
    assert frozen({"a": [1, True]}) != frozen({"a": [True, 1]})


def test_a_hash_collision_never_serves_another_request() -> None:
    """Two different requests whose hashes are made equal: the whole key is compared."""
    cache = ResponseCache(1 << 20)
    scope = Scope("m", "1")
    a = request_key(scope, {"X": np.zeros(2, np.float32)}, {})
    b = request_key(scope, {"X": np.ones(2, np.float32)}, {})
    assert a is not None
    assert b is not None
    b.digest = a.digest  # a collision
    entry = kept_entry(a, {"OUT": np.array([7.0])})
    assert entry is not None
    cache.put(entry)
    assert cache.get(b) is None
    answer = cache.get(a)
    assert answer is not None
    assert answer["OUT"].tolist() == [7.0]


def test_another_load_of_the_version_does_not_see_old_entries() -> None:
    cache = ResponseCache(1 << 20)
    x = {"X": np.zeros(2, np.float32)}
    old = request_key(Scope("m", "1"), x, {})
    new = request_key(Scope("m", "1"), x, {})
    assert old is not None
    assert new is not None
    entry = kept_entry(old, {"OUT": np.zeros(1)})
    assert entry is not None
    cache.put(entry)
    assert cache.get(new) is None


def test_the_model_writing_its_arrays_later_does_not_change_the_cache() -> None:
    invoker, inner, _ = cached()
    x = np.arange(4, dtype=np.float32)
    first, _ = run(invoker, x)
    expected = first["OUT"].copy()
    inner.last["OUT"][:] = -1  # the model reuses its buffer
    x[:] = 100  # and the client's buffer changes too
    again, call = run(invoker, np.arange(4, dtype=np.float32))
    assert call.cache_hit_ns > 0
    assert again["OUT"].tobytes() == expected.tobytes()
    assert not again["OUT"].flags.writeable


def test_least_recently_used_entries_go_first_within_the_bound() -> None:
    size = ENTRY_OVERHEAD + 2 * 128 + 8 * 16  # one entry: an 8-element float64 in and out
    invoker, inner, _ = cached(capacity=2 * size)
    xs = [np.full(8, i, dtype=np.float64) for i in range(3)]
    run(invoker, xs[0])
    run(invoker, xs[1])
    run(invoker, xs[0])  # used again: xs[1] is now the least recent
    run(invoker, xs[2])  # evicts xs[1]
    assert inner.calls == 3
    assert invoker.cache.used <= invoker.cache.capacity
    run(invoker, xs[0])
    assert inner.calls == 3
    run(invoker, xs[1])
    assert inner.calls == 4


def test_an_answer_larger_than_the_cache_is_not_cached() -> None:
    invoker, inner, mv = cached(capacity=1024)
    big = np.zeros(1024, dtype=np.float64)
    run(invoker, big)
    run(invoker, big)
    assert inner.calls == 2
    assert len(invoker.cache) == 0
    assert mv.stats.cache_miss.count == 2


def test_bytes_inputs_are_keyed_by_their_elements() -> None:
    scope = Scope("m", "1")
    one = request_key(scope, {"T": np.array([b"ab", b"c"], dtype=object)}, {})
    two = request_key(scope, {"T": np.array([b"a", b"bc"], dtype=object)}, {})
    assert one is not None
    assert two is not None
    assert one != two
    assert request_key(scope, {"T": np.array(["text"], dtype=object)}, {}) is None


def test_answers_that_could_change_are_not_kept() -> None:
    key = request_key(Scope("m", "1"), {}, {})
    assert key is not None
    assert kept_entry(key, {"OUT": np.array([bytearray(b"x")], dtype=object)}) is None
    assert kept_entry(key, {"OUT": None}) is None
    kept = kept_entry(key, {"OUT": [b"a", b"b"]})
    assert isinstance(kept, Entry)
    assert kept.answer["OUT"].tolist() == [b"a", b"b"]


def test_keys_compare_every_byte() -> None:
    scope = Scope("m", "1")
    a = Key(scope, (("X", "<f4", (1,), b"\x00\x00\x00\x00"),), frozen({}), 4)
    b = Key(scope, (("X", "<f4", (1,), b"\x00\x00\x00\x01"),), frozen({}), 4)
    again = Key(scope, (("X", "<f4", (1,), b"\x00\x00\x00\x00"),), frozen({}), 4)
    assert a == again
    assert hash(a) == hash(again)
    assert a != b


def test_bfloat16_and_other_two_byte_types_are_told_apart() -> None:
    import ml_dtypes

    scope = Scope("m", "1")
    raw = np.zeros(2, np.uint16)
    halves = request_key(scope, {"X": raw.view(np.float16)}, {})
    brains = request_key(scope, {"X": raw.view(ml_dtypes.bfloat16)}, {})
    assert halves != brains


def test_unhashable_parameters_are_not_cached() -> None:
    assert request_key(Scope("m", "1"), {}, {"p": {1, 2}}) is None
