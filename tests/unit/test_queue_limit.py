"""The queue limit shared between API keys (core/queue_limit.py): a tenant under its weighted
share is admitted over the limit, the one that floods is refused; alone, a tenant meets the
plain limit; at twice the limit everyone is refused.

A request here is admitted and then counted in flight on the version, as the planes do; on a
model without a batcher every request in flight counts as waiting."""

from __future__ import annotations

import pytest

from rosettaserve.core import queue_limit
from rosettaserve.core.dataplane import DataPlane, Limits
from rosettaserve.core.errors import Overloaded
from rosettaserve.core.generate import GeneratorInfo
from rosettaserve.core.generation_plane import GenerationPlane
from rosettaserve.core.registry import ModelVersion
from rosettaserve.core.share import DEFAULT, SHARE, Share


def enter(mv: ModelVersion, share: Share, limit: int, running: int = 0) -> Share:
    """Admit a request of ``share`` (``running`` of those in flight are not waiting), then
    count it in flight."""
    token = SHARE.set(share)
    try:
        held = queue_limit.admit(mv, limit, mv.inflight - running)
    finally:
        SHARE.reset(token)
    mv.inflight += 1
    return held


def leave(mv: ModelVersion, held: Share) -> None:
    queue_limit.release(mv, held)
    mv.inflight -= 1


def fill(mv: ModelVersion, share: Share, limit: int, running: int = 0) -> list[Share]:
    """``share``'s requests until one is refused: the admitted ones."""
    admitted = []
    while True:
        try:
            admitted.append(enter(mv, share, limit, running))
        except Overloaded:
            return admitted


A, B, C = Share("a", 1.0, 0), Share("b", 1.0, 0), Share("c", 1.0, 0)


def test_one_tenant_meets_the_plain_limit_as_without_keys() -> None:
    for tenant in (DEFAULT, Share("only-key", 4.0, 0)):
        mv = ModelVersion("m", "1", "python")
        assert len(fill(mv, tenant, 3)) == 3
        with pytest.raises(Overloaded) as refused:
            enter(mv, tenant, 3)
        assert refused.value.message == (
            "model 'm' version 1 is overloaded: 3 requests are queued, its limit; retry later"
        )
        assert refused.value.headers == {"retry-after": "1"}
        assert mv.tenants.held == {tenant.tenant: 3}


def test_a_quiet_key_gets_its_share_over_the_limit_and_the_flood_is_refused() -> None:
    mv = ModelVersion("m", "1", "python")
    assert len(fill(mv, A, 4)) == 4  # alone: the whole limit
    assert len(fill(mv, B, 4)) == 2  # half of 4 (equal weights), though 4 were waiting
    with pytest.raises(Overloaded, match="4 of those in flight are this API key's, its share"):
        enter(mv, A, 4)
    assert mv.tenants.held == {"a": 4, "b": 2}
    assert mv.inflight == 6


@pytest.mark.parametrize(
    ("weight", "share"),
    [(3.0, 3), (1.0, 2), (1 / 3, 1), (0.01, 1)],  # 4 * w / (1 + w), rounded up; at least 1
)
def test_a_share_is_the_limit_weighted_among_the_keys_in_flight(weight: float, share: int) -> None:
    mv = ModelVersion("m", "1", "python")
    fill(mv, A, 4)
    assert len(fill(mv, Share("b", weight, 0), 4)) == share


def test_the_keys_in_flight_are_those_that_count_and_the_newcomer() -> None:
    mv = ModelVersion("m", "1", "python")
    fill(mv, A, 6)
    quiet = fill(mv, B, 6)
    assert len(quiet) == 3  # 6 / 2
    assert len(fill(mv, C, 6)) == 2  # 6 / 3: a, b and c hold requests
    for held in quiet:
        leave(mv, held)
    assert mv.tenants.held == {"a": 6, "c": 2}  # b left: its weight no longer counts
    assert len(fill(mv, C, 6)) == 1  # 6 / 2


def test_the_flood_is_refused_until_it_drains_below_its_share() -> None:
    mv = ModelVersion("m", "1", "python")
    flood = fill(mv, A, 6)
    fill(mv, B, 6)
    fill(mv, C, 6)  # a 6, b 3, c 2: 11 waiting; a's share is 6 / 3 = 2
    while len(flood) > 2:
        leave(mv, flood.pop())
        with pytest.raises(Overloaded):
            enter(mv, A, 6)
    leave(mv, flood.pop())  # a holds 1, under its share, and 6 still wait: the limit
    assert mv.inflight == 6
    enter(mv, A, 6)


def test_the_total_never_passes_twice_the_limit() -> None:
    """Each newcomer would get a share again (4/2 + 4/3 + 4/4 + ...): at 2L nobody is."""
    mv = ModelVersion("m", "1", "python")
    counts = [len(fill(mv, Share(f"t{i}", 1.0, 0), 4)) for i in range(12)]
    assert mv.inflight == 8
    assert counts[:4] == [4, 2, 2, 0]  # the third: 4/3 rounded up, and then 2L
    with pytest.raises(Overloaded, match="8 requests are queued, twice its limit of 4"):
        enter(mv, Share("new", 1000.0, 0), 4)


def test_with_running_requests_a_share_is_of_the_limit_and_those_running() -> None:
    """An LLM engine's running sequences are in flight but not waiting: each key's share is of
    everything the version holds when full (L waiting + those running)."""
    mv = ModelVersion("m", "1", "llm")
    fill(mv, A, 2, running=2)  # 2 running + 2 waiting, all a's
    assert mv.inflight == 4
    assert len(fill(mv, B, 2, running=2)) == 2  # (2 + 2) / 2: b's may run as a's do
    assert mv.inflight == 6


def test_the_rule_counts_places_of_any_size() -> None:
    """As the LLM engine's capacity counts sequences (``n`` per request): a request's places,
    with those its tenant holds, stay within the tenant's share, rounded up."""
    tenants = queue_limit.Tenants()
    tenants.hold(A, 4)
    assert tenants.refusal(A, 1, 2, 4, 4) == queue_limit.ADMITTED  # within the limit
    assert tenants.refusal(A, 4, 1, 4, 4) == queue_limit.AT_LIMIT  # alone
    assert tenants.refusal(B, 4, 2, 4, 4) == queue_limit.ADMITTED  # 4 / 2
    assert tenants.refusal(B, 4, 3, 4, 4) == queue_limit.AT_SHARE
    tenants.hold(B, 2)
    assert tenants.refusal(C, 6, 2, 4, 4) == queue_limit.ADMITTED  # 4 / 3, rounded up
    assert tenants.refusal(C, 6, 3, 4, 4) == queue_limit.AT_TWICE  # 9 > 2 x 4
    tenants.release(A, 4)
    tenants.release(B, 2)
    assert tenants.held == {}
    assert tenants.weights == {}


class Generator:
    info = GeneratorInfo("m", 64, 1, max_num_seqs=2, max_waiting=8, max_stop_sequences=4,
                         dtype="float32", device="cpu")  # fmt: skip


def test_the_generation_plane_admits_by_the_same_rule() -> None:
    plane = GenerationPlane(DataPlane(registry=None, limits=Limits(max_queue_size=2)))  # type: ignore[arg-type]
    mv = ModelVersion("m", "1", "llm")
    counted = []
    for share in (A, A, A, A, B, B):  # a: 2 running, 2 waiting; b: its (2 + 2) / 2
        token = SHARE.set(share)
        counted.append(plane.admit(mv, Generator()))  # type: ignore[arg-type]
        SHARE.reset(token)
        mv.inflight += 1
    assert mv.tenants.held == {"a": 4, "b": 2}
    token = SHARE.set(A)
    with pytest.raises(Overloaded, match="twice its limit of 2"):
        plane.admit(mv, Generator())  # type: ignore[arg-type]
    SHARE.reset(token)
    for held in counted:
        queue_limit.release(mv, held)
    assert mv.tenants.held == {}
    assert mv.tenants.weights == {}


def test_without_a_limit_nothing_is_counted() -> None:
    plane = GenerationPlane(DataPlane(registry=None, limits=Limits()))  # type: ignore[arg-type]
    mv = ModelVersion("m", "1", "llm")
    mv.inflight = 100
    assert plane.admit(mv, Generator()) is None  # type: ignore[arg-type]
    assert mv.tenants.held == {}
