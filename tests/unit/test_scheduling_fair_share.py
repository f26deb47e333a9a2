"""The order queues serve in: priority first, then weighted fair queueing between tenants (API
keys), first come first served within one tenant; and the dynamic batcher keeps that order.

Orders are checked, never times: the model holds its first call, so everything else queues."""

from __future__ import annotations

import asyncio
from collections import deque
from typing import Any

import numpy as np
import pytest

from rosettaserve.core import share
from rosettaserve.core.errors import InvalidInput
from rosettaserve.core.share import Share
from rosettaserve.scheduling.fair_share import Clock, place
from tests.unit.test_scheduling_batcher import (
    Recorder,
    batcher,
    first_held,
    plane,
    request,
    run,
    served,
    until,
)


class Item:
    def __init__(self, name: str, priority: int, tag: float) -> None:
        self.name, self.priority, self.tag = name, priority, tag


def served_order(arrivals: list[tuple[str, Share]], cost: float = 1.0) -> list[str]:
    """All of ``arrivals`` queued (names), then served one by one."""
    clock, queue = Clock(), deque[Item]()
    for name, who in arrivals:
        place(queue, Item(name, who.priority, clock.start(who, cost)))
    order = []
    while queue:
        item = queue.popleft()
        clock.served(item.tag)
        order.append(item.name)
    return order


A, B = Share("key#1", 1.0, 0), Share("key#2", 1.0, 0)


def test_one_tenant_is_served_first_come_first_served() -> None:
    assert served_order([(str(i), share.DEFAULT) for i in range(6)]) == list("012345")


def test_a_lower_priority_value_is_served_first_then_arrival_order() -> None:
    arrivals = [("a", A), ("b", A.prioritised(5)), ("c", A.prioritised(-2)), ("d", A)]
    arrivals += [("e", A.prioritised(-2))]
    assert served_order(arrivals) == ["c", "e", "a", "d", "b"]


def test_a_flood_from_one_key_does_not_push_back_the_other() -> None:
    arrivals = [(f"a{i}", A) for i in range(10)] + [("b0", B), ("b1", B)]
    order = served_order(arrivals)
    # b's first request goes with a's first: the tenants take turns
    assert order[:4] == ["a0", "b0", "a1", "b1"]
    assert order[4:] == [f"a{i}" for i in range(2, 10)]


def test_weights_share_the_service_in_their_proportion() -> None:
    heavy = Share("key#1", 3.0, 0)
    arrivals = [(f"h{i}", heavy) for i in range(12)] + [(f"l{i}", B) for i in range(12)]
    first_eight = served_order(arrivals)[:8]
    assert sum(name.startswith("h") for name in first_eight) == 6  # 3 to 1


def test_a_tenant_back_from_idle_gets_no_credit_for_its_idle_time() -> None:
    clock = Clock()
    for _ in range(5):
        clock.served(clock.start(A, 1.0))
    # B was idle all along: it starts at the virtual time (A's last start), not at 0, five
    # requests ahead of A
    assert clock.start(B, 1.0) == clock.now == 4.0


def test_priority_values_are_checked() -> None:
    assert share.priority(" -4 ", "the X-Priority header") == -4
    for hostile in ("high", "1.5", "", "99999999999", True, 1.5, None):
        with pytest.raises(InvalidInput, match="must be"):
            share.priority(hostile, "the X-Priority header")


def test_triton_levels_put_1_first_and_0_at_the_default() -> None:
    assert share.triton_level(0, "p") is None
    one, two = share.triton_level(1, "p"), share.triton_level(2, "p")
    assert one is not None
    assert two is not None
    assert share.MIN_PRIORITY <= one < two < 0  # before every request at the default
    assert share.triton_level(share.MAX_TRITON_LEVEL, "p") == -1  # the last level
    assert share.triton_level(2**63 + 5, "p") is None  # past the last level: the default
    for hostile in (-1, "1", 1.0, False):
        with pytest.raises(InvalidInput, match="Triton priority level"):
            share.triton_level(hostile, "request parameter 'priority'")


# -- the dynamic batcher keeps that order ---------------------------------------------------------


async def infer_as(dp: Any, value: float, who: Share, **context: Any) -> Any:
    share.SHARE.set(who)  # (in this task's own context, as a transport sets it)
    return await dp.infer(request(np.full((1, 2), value, np.float32), **context))


def batch_values(model: Recorder) -> list[float]:
    return [float(batch[0, 0]) for batch in model.seen[1:]]


def test_the_batcher_serves_a_flooding_key_and_a_quiet_one_in_turns() -> None:
    async def body() -> None:
        model = Recorder()
        mv = served(model, max_batch_size=1)
        dp = plane(mv)
        held = await first_held(dp, model)
        tasks = [asyncio.create_task(infer_as(dp, float(i), A)) for i in range(8)]
        await until(lambda: batcher(mv).waiting == 8)
        tasks += [asyncio.create_task(infer_as(dp, 100.0 + i, B)) for i in range(2)]
        await until(lambda: batcher(mv).waiting == 10)
        model.gate.set()
        await asyncio.gather(held, *tasks)
        assert batch_values(model) == [0, 100, 1, 101, 2, 3, 4, 5, 6, 7]

    run(body)


def test_the_batcher_serves_by_priority_and_oip_levels() -> None:
    async def body() -> None:
        model = Recorder()
        mv = served(model, max_batch_size=1)
        dp = plane(mv)
        held = await first_held(dp, model)
        tasks = [
            asyncio.create_task(infer_as(dp, 1.0, share.DEFAULT)),
            asyncio.create_task(infer_as(dp, 2.0, share.DEFAULT.prioritised(3))),
            asyncio.create_task(infer_as(dp, 3.0, share.DEFAULT.prioritised(-1))),
            # OIP's priority parameter, level 1 (Triton's highest): before everything else
            asyncio.create_task(infer_as(dp, 4.0, share.DEFAULT, **{share.PRIORITY: -(2**31)})),
        ]
        await until(lambda: batcher(mv).waiting == 4)
        model.gate.set()
        await asyncio.gather(held, *tasks)
        assert batch_values(model) == [4, 3, 1, 2]

    run(body)


def test_a_batch_takes_the_queue_in_its_order() -> None:
    async def body() -> None:
        model = Recorder()
        mv = served(model, max_batch_size=3)
        dp = plane(mv)
        held = await first_held(dp, model)
        tasks = [asyncio.create_task(infer_as(dp, float(i), A)) for i in range(4)]
        await until(lambda: batcher(mv).waiting == 4)
        tasks.append(asyncio.create_task(infer_as(dp, 100.0, B)))
        await until(lambda: batcher(mv).waiting == 5)
        model.gate.set()
        await asyncio.gather(held, *tasks)
        assert [b[:, 0].tolist() for b in model.seen[1:]] == [[0, 100, 1], [2, 3]]

    run(body)
