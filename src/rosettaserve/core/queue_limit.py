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

The rule itself (``Tenants.refusal``) counts places of any kind: here requests, one each; the
LLM engine's own capacity (runtimes/llm/capacity.py) counts sequences, ``n`` per request, with
the same rule.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Final, NoReturn

from rosettaserve.core.errors import Overloaded
from rosettaserve.core.share import SHARE, Share

if TYPE_CHECKING:
    from rosettaserve.core.registry import ModelVersion

RETRY_AFTER_S = "1"  # the Retry-After of an overloaded model's 429
# What ``Tenants.refusal`` finds: admitted, or refused, and why
ADMITTED: Final = 0
AT_LIMIT: Final = 1  # full, and no other tenant holds places: the plain limit
AT_TWICE: Final = 2  # full to twice the limit: everyone is refused
AT_SHARE: Final = 3  # full, and the tenant holds its share


class Tenants:
    """One version's requests in flight by tenant, and each tenant's weight."""

    __slots__ = ("held", "weights")

    def __init__(self) -> None:
        self.held: dict[str, int] = {}
        self.weights: dict[str, float] = {}

    def hold(self, share: Share, count: int = 1) -> None:
        tenant = share.tenant
        self.held[tenant] = self.held.get(tenant, 0) + count
        self.weights[tenant] = share.weight

    def release(self, share: Share, count: int = 1) -> None:
        tenant = share.tenant
        left = self.held[tenant] - count
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

    def refusal(self, share: Share, used: int, need: int, limit: int, pool: int) -> int:
        """Whether a request of ``share`` taking ``need`` places, ``used`` of ``limit`` (> 0)
        taken, is ``ADMITTED`` or refused (``AT_LIMIT``, ``AT_TWICE``, ``AT_SHARE``); ``pool``:
        the places its share is of (what the version holds when full). Up to the limit every
        request is admitted; past it, one whose tenant's places, with its own, stay within its
        share (rounded up: a request of one place is admitted while its tenant holds less)."""
        if used + need <= limit:
            return ADMITTED
        held = self.held.get(share.tenant, 0)
        if len(self.held) == (1 if held else 0):  # no other tenant: the plain limit
            return AT_LIMIT
        if used + need > 2 * limit:
            return AT_TWICE
        if held + need > math.ceil(self.share_of(share, pool)):
            return AT_SHARE
        return ADMITTED


def admit(mv: ModelVersion, limit: int, waiting: int) -> Share:
    """Admit a request to ``mv`` (``waiting`` requests wait on it) under ``limit`` (> 0), or
    refuse it (``Overloaded``). Counted: the ``Share`` to ``release`` when it leaves."""
    share = SHARE.get()
    tenants = mv.tenants
    why = tenants.refusal(share, waiting, 1, limit, limit + max(0, mv.inflight - waiting))
    if why == AT_LIMIT:
        _refuse(mv, f"{waiting} requests are queued, its limit")
    if why == AT_TWICE:
        _refuse(mv, f"{waiting} requests are queued, twice its limit of {limit}")
    if why == AT_SHARE:
        held = tenants.held[share.tenant]
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
