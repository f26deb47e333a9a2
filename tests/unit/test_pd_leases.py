"""The prefill instance's KV leases (pd/leases.py): freed on fetch, give-back or expiry; held
within a byte budget (a hand-over beyond it is refused, 503); bound to the job key they were
made with (another key neither fetches, gives back nor drops them); a duplicate id refused
(409), never dropping or replacing the lease it collides with."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

import pytest

from rosettaserve.pd.leases import (
    DuplicateLease,
    Leases,
    LeasesFull,
    WrongKey,
    default_budget,
    memory_limit,
)

KEY, OTHER = "k" * 24, "o" * 24


def run(scenario: Callable[[], Coroutine[Any, Any, None]]) -> None:
    asyncio.run(asyncio.wait_for(scenario(), 10))


def test_a_lease_ends_on_fetch_give_back_or_expiry() -> None:
    async def scenario() -> None:
        leases = Leases(ttl=0.05, budget=1000)
        leases.put("1", b"one", KEY)
        leases.put("2", b"two", KEY)
        leases.put("3", b"three", KEY)
        assert (len(leases), leases.nbytes) == (3, 11)
        assert leases.take("1", KEY) == b"one"  # the fetch ends it
        assert leases.take("1", KEY) is None
        assert leases.release("2", KEY) is True
        assert leases.release("2", KEY) is False
        assert (len(leases), leases.nbytes) == (1, 5)
        while len(leases):  # the last one runs out
            await asyncio.sleep(0.01)
        assert (leases.nbytes, leases.released, leases.expired) == (0, 2, 1)

    run(scenario)


def test_a_lease_answers_only_its_own_key() -> None:
    async def scenario() -> None:
        leases = Leases(ttl=60, budget=1000)
        leases.put("1", b"cache", KEY)
        with pytest.raises(WrongKey, match="held for another party"):
            leases.take("1", OTHER)
        assert leases.release("1", OTHER) is False
        assert leases.drop("1", OTHER) is False
        assert leases.take("1", KEY) == b"cache"  # it was all kept for its own party

    run(scenario)


def test_a_duplicate_id_is_refused_and_the_held_lease_stays_whole() -> None:
    async def scenario() -> None:
        leases = Leases(ttl=60, budget=1000)
        leases.put("7", b"victim", KEY)
        with pytest.raises(DuplicateLease, match="duplicate req-id") as caught:
            leases.check("7")  # before any work is done
        assert caught.value.http_status == 409
        with pytest.raises(DuplicateLease):
            leases.put("7", b"attacker", OTHER)
        with pytest.raises(DuplicateLease):
            leases.put("7", b"again", KEY)  # the same key too: an id is leased once
        assert (len(leases), leases.nbytes) == (1, 6)
        assert leases.take("7", KEY) == b"victim"
        leases.put("7", b"next", KEY)  # once it ended, the id is free again
        assert leases.take("7", KEY) == b"next"

    run(scenario)


def test_the_budget_bounds_the_bytes_held_and_frees_as_leases_end() -> None:
    async def scenario() -> None:
        leases = Leases(ttl=60, budget=10)
        leases.put("1", b"123456", KEY)
        with pytest.raises(LeasesFull, match="--kv-lease-budget") as caught:
            leases.put("2", b"12345", KEY)  # 11 bytes would be held
        assert caught.value.http_status == 503
        assert caught.value.headers == {"retry-after": "1"}
        leases.put("2", b"1234", KEY)  # exactly the budget
        with pytest.raises(LeasesFull):
            leases.check("3")  # full: refused before the work is done
        assert leases.refused == 2
        assert leases.take("1", KEY) == b"123456"
        leases.check("3")
        leases.put("3", b"12345", KEY)
        assert leases.nbytes == 9

    run(scenario)


def test_the_default_budget_is_a_quarter_of_the_memory_the_process_may_use() -> None:
    assert 0 < memory_limit() <= _physical()
    assert default_budget() == memory_limit() // 4


def _physical() -> int:
    import os

    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
