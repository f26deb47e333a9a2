"""The KV caches a prefill instance holds for decode instances: leases, bounded in time and bytes.

A lease is made when a request is handed over and holds its encoded cache (empty for an
engine that hands none over: the lease then only says the hand-over happened) under the
request's id and its job key (``pd-job-key``), a secret only the scheduler, this instance and
the decode instance know. It ends when the decode instance fetches it (``take``, with the key),
gives it back (``release``, with the key), when the hand-over fails (``drop``), or after
``ttl`` seconds, whichever comes first.

Bounds: the bytes held together stay within ``budget`` (a hand-over that does not fit is
refused, 503, ``LeasesFull``), and an id that is held is not leased again (409,
``DuplicateLease``): another party's request under the same id never drops or replaces a
lease. Sizes are counted as leases come and go, so every operation is O(1).
"""

from __future__ import annotations

import asyncio
import hmac
import os
from dataclasses import dataclass
from pathlib import Path

from rosettaserve.core.errors import ServingError
from rosettaserve.core.status import ErrorKind

MEMORY_SHARE = 4  # the default budget: a quarter of the memory this process may use
_CGROUP_LIMITS = (Path("/sys/fs/cgroup/memory.max"),
                  Path("/sys/fs/cgroup/memory/memory.limit_in_bytes"))  # fmt: skip


class LeasesFull(ServingError):
    """The caches held for decode instances fill ``--kv-lease-budget``."""

    kind = ErrorKind.UNAVAILABLE


class DuplicateLease(ServingError):
    kind = ErrorKind.ALREADY_EXISTS


class WrongKey(ServingError):
    """A lease asked for with another key than its own: not the party it was made for."""

    kind = ErrorKind.FORBIDDEN


@dataclass
class Lease:
    payload: bytes
    key: str
    timer: asyncio.TimerHandle

    def owned_by(self, key: str) -> bool:
        return hmac.compare_digest(self.key.encode(), key.encode())


def memory_limit() -> int:
    """The memory this process may use: its cgroup's limit (a container's), else the machine's."""
    physical = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    for path in _CGROUP_LIMITS:
        try:
            text = path.read_text().strip()
        except OSError:
            continue
        if text.isdigit():
            return min(int(text), physical)
    return int(physical)


def default_budget() -> int:
    return memory_limit() // MEMORY_SHARE


class Leases:
    def __init__(self, ttl: float, budget: int) -> None:
        self.ttl = ttl
        self.budget = budget
        self._held: dict[str, Lease] = {}
        self.nbytes = 0
        self.expired = 0
        self.released = 0  # fetched or given back by a decode instance
        self.refused = 0  # hand-overs refused: the budget was full

    def __len__(self) -> int:
        return len(self._held)

    def check(self, req_id: str) -> None:
        """Before the work of a request is done: refuse it if its lease could not be made."""
        if req_id in self._held:
            raise self._duplicate(req_id)
        if self.nbytes >= self.budget:
            raise self._full(0)

    def put(self, req_id: str, payload: bytes, key: str) -> None:
        if req_id in self._held:
            raise self._duplicate(req_id)
        if self.nbytes + len(payload) > self.budget:
            raise self._full(len(payload))
        timer = asyncio.get_running_loop().call_later(self.ttl, self._expire, req_id)
        self._held[req_id] = Lease(payload, key, timer)
        self.nbytes += len(payload)

    def take(self, req_id: str, key: str) -> bytes | None:
        """The cache, its lease ended (a fetch); None: none is held; WrongKey: not for ``key``."""
        lease = self._held.get(req_id)
        if lease is None:
            return None
        if not lease.owned_by(key):
            raise WrongKey(f"the KV cache of request {req_id} is held for another party")
        self._end(req_id)
        self.released += 1
        return lease.payload

    def release(self, req_id: str, key: str) -> bool:
        lease = self._held.get(req_id)
        if lease is None or not lease.owned_by(key):
            return False
        self._end(req_id)
        self.released += 1
        return True

    def drop(self, req_id: str, key: str) -> bool:
        """The hand-over failed: the lease made for it goes (only its own, by its key)."""
        lease = self._held.get(req_id)
        if lease is None or not lease.owned_by(key):
            return False
        self._end(req_id)
        return True

    def _end(self, req_id: str) -> None:
        lease = self._held.pop(req_id)
        lease.timer.cancel()
        self.nbytes -= len(lease.payload)

    def _expire(self, req_id: str) -> None:
        if req_id in self._held:
            self._end(req_id)
            self.expired += 1

    def _duplicate(self, req_id: str) -> DuplicateLease:
        return DuplicateLease(
            f"request {req_id} is already held here for a decode instance (a duplicate req-id)"
        )

    def _full(self, size: int) -> LeasesFull:
        self.refused += 1
        return LeasesFull(
            f"this prefill instance holds {self.nbytes} bytes of KV caches for decode instances "
            f"and {size} more would exceed its budget of {self.budget} (--kv-lease-budget); "
            "try again shortly",
            headers={"retry-after": "1"},
        )
