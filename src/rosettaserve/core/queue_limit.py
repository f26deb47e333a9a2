"""The queue limit (``max_queue_size``), shared between tenants: one API key's flood cannot take
the queue from the others.

Both planes (dataplane.py for tensor requests, generation_plane.py for LLM requests) admit a
request here. With a limit L, a request that finds L requests waiting is refused at once
(``Overloaded``: 429 / RESOURCE_EXHAUSTED) only if its tenant (core/share.py: its API key)
already holds its weighted share of the version: ``max(1, P * w / W)``, where ``w`` is its
tenant's weight, ``W`` the sum of the weights of the tenants that have requests in flight on the
version (its own counted), and ``P`` the requests the version holds when full: the L waiting
plus those running (``inflight - waiting``; none where every request in flight counts as
waiting, as on a model without a batcher, so there ``P`` is L). A tenant under its share is
admitted over L; the one that floods is refused until it drains below its share. Alone (no keys:
one tenant), a tenant's share is everything: refused at L, as without tenants.

The counts are requests in flight (waiting or running) by tenant, as ``ModelVersion.inflight``
counts them all: only while the version has a limit (``admit`` returns the ``Share`` it counted,
None without a limit), and given back by ``release`` where the request leaves, whichever way.

Bound: however many tenants arrive, at 2L waiting every request is refused, whoever sends it (a
tenant arriving while the others hold their shares gets its own share again, so without this
the total would grow with the number of tenants).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NoReturn

from rosettaserve.core.errors import Overloaded
from rosettaserve.core.share import SHARE, Share

if TYPE_CHECKING:
    from rosettaserve.core.registry import ModelVersion

RETRY_AFTER_S = "1"  # the Retry-After of an overloaded model's 429


class Tenants:
    """One version's requests in flight by tenant, and each tenant's weight."""

    __slots__ = ("held", "weights")

    def __init__(self) -> None:
        self.held: dict[str, int] = {}
        self.weights: dict[str, float] = {}

    def hold(self, share: Share) -> None:
        tenant = share.tenant
        self.held[tenant] = self.held.get(tenant, 0) + 1
        self.weights[tenant] = share.weight

    def release(self, share: Share) -> None:
        tenant = share.tenant
        left = self.held[tenant] - 1
        if left:
            self.held[tenant] = left
        else:
            del self.held[tenant]
            del self.weights[tenant]

    def share_of(self, share: Share, pool: int) -> float:
        """``share``'s tenant's part of ``pool`` requests, among the tenants holding some."""
        total = share.weight
        for tenant, weight in self.weights.items():
            if tenant != share.tenant:
                total += weight
        return max(1.0, pool * share.weight / total)


def admit(mv: ModelVersion, limit: int, waiting: int) -> Share:
    """Admit a request to ``mv`` (``waiting`` requests wait on it) under ``limit`` (> 0), or
    refuse it (``Overloaded``). Counted: the ``Share`` to ``release`` when it leaves."""
    share = SHARE.get()
    tenants = mv.tenants
    if waiting >= limit:
        held = tenants.held.get(share.tenant, 0)
        if len(tenants.held) == (1 if held else 0):  # no other tenant: the plain limit
            _refuse(mv, f"{waiting} requests are queued, its limit")
        if waiting >= 2 * limit:
            _refuse(mv, f"{waiting} requests are queued, twice its limit of {limit}")
        if held >= tenants.share_of(share, limit + max(0, mv.inflight - waiting)):
            _refuse(
                mv,
                f"{waiting} requests are queued, its limit, and {held} of those in flight "
                "are this API key's, its share",
            )
    tenants.hold(share)
    return share


def _refuse(mv: ModelVersion, why: str) -> NoReturn:
    raise Overloaded(
        f"model '{mv.name}' version {mv.version} is overloaded: {why}; retry later",
        headers={"retry-after": RETRY_AFTER_S},
    )


def release(mv: ModelVersion, held: Share | None) -> None:
    """A request admitted by ``admit`` left (answered, failed, cancelled, timed out)."""
    if held is not None:
        mv.tenants.release(held)
