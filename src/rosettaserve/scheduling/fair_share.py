"""The order of a queue: priority first, then weighted fair queueing between tenants.

Start-time fair queueing (Goyal, Vin and Cheng, 1996): a request's start tag is the later of the
queue's virtual time and its tenant's last finish tag; its finish tag is its start tag plus its
cost (rows, tokens) over its tenant's weight. Requests are served by (priority, start tag): a
tenant that sends ten times another's rate gets its share of the server, not ten times the
other's, and a tenant under its share is served almost at once whatever the others queued.
The virtual time is the start tag of the request served last. Within one tenant the tags only
grow, so one tenant alone (no keys, one priority) is served first come first served, and its
requests are appended, never sorted in.

A queued item is anything with ``priority`` and ``tag`` (the batcher's ``Pending``, the
engine's ``Group``): ``enqueue`` gives it the request's (core/share.py) and puts it where its
order says.
"""

from __future__ import annotations

import bisect
from collections import deque
from typing import Protocol, TypeVar

from rosettaserve.core.share import SHARE, Share


class Ordered(Protocol):
    priority: int
    tag: float


T = TypeVar("T", bound=Ordered)


class Clock:
    """A queue's virtual time and each tenant's last finish tag."""

    __slots__ = ("finish", "now")

    def __init__(self) -> None:
        self.now = 0.0
        self.finish: dict[str, float] = {}

    def start(self, share: Share, cost: float) -> float:
        """The start tag of a request of ``share`` costing ``cost``."""
        tenant = share.tenant
        last = self.finish.get(tenant, 0.0)
        start = last if last > self.now else self.now
        self.finish[tenant] = start + cost / share.weight
        return start

    def served(self, tag: float) -> None:
        self.now = max(self.now, tag)

    def idle(self) -> None:
        """The queue ran empty: history is forgotten (and the tenants' tags with it)."""
        self.now = 0.0
        self.finish.clear()


def enqueue(queue: deque[T], clock: Clock, item: T, cost: float) -> None:
    """``item``, of the request being served, costing ``cost``, queued in its place."""
    share = SHARE.get()
    item.priority = share.priority
    item.tag = clock.start(share, cost)
    place(queue, item)


def _rank(item: Ordered) -> tuple[int, float]:
    return item.priority, item.tag


def place(queue: deque[T], item: T) -> None:
    """``item`` after every queued one that goes before it or with it (equal: first come)."""
    if queue:
        last = queue[-1]
        if item.priority < last.priority or (
            item.priority == last.priority and item.tag < last.tag
        ):
            queue.insert(bisect.bisect_right(queue, _rank(item), key=_rank), item)
            return
    queue.append(item)
