"""The memory budget's choices: sizes as people write them, which idle versions make room (the
least recently used first, never one in flight), and a version that can never fit."""

from __future__ import annotations

import pytest

from rosettaserve.core.registry import ModelVersion, VersionState
from rosettaserve.repository.residency import parse_size, to_evict, too_big

MIB = 1 << 20


@pytest.mark.parametrize(
    ("text", "size"),
    [
        ("12GiB", 12 << 30),
        ("512MiB", 512 * MIB),
        ("1.5KiB", 1536),
        ("2G", 2_000_000_000),
        ("3mb", 3_000_000),
        ("1048576", MIB),
    ],
)
def test_sizes(text: str, size: int) -> None:
    assert parse_size(text) == size


@pytest.mark.parametrize("text", ["", "12 lots", "GiB", "-1G", "1PiB"])
def test_what_is_not_a_size_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match="expected a size such as 512MiB"):
        parse_size(text)


def version(name: str, mib: int, used_ms: int, inflight: int = 0) -> ModelVersion:
    mv = ModelVersion(name, "1", "python", state=VersionState.READY)
    mv.resident_bytes, mv.loaded_ms, mv.inflight = mib * MIB, used_ms, inflight
    return mv


def test_the_least_recently_used_idle_versions_make_room() -> None:
    old, older, recent = version("old", 40, 200), version("older", 40, 100), version("r", 40, 300)
    loading = version("new", 40, 400)
    served = [old, older, recent, loading]
    assert to_evict(served, loading, 40 * MIB, 160 * MIB) == []  # 120 + 40 fit
    assert to_evict(served, loading, 60 * MIB, 160 * MIB) == [older]
    assert to_evict(served, loading, 100 * MIB, 160 * MIB) == [older, old]


def test_a_version_with_a_request_in_flight_is_never_chosen() -> None:
    busy, idle = version("busy", 40, 100, inflight=1), version("idle", 40, 200)
    loading = version("new", 40, 300)
    assert to_evict([busy, idle, loading], loading, 200 * MIB, 160 * MIB) == [idle]


def test_unloaded_versions_hold_nothing() -> None:
    gone = version("gone", 0, 50)
    gone.state = VersionState.UNLOADED
    held = version("held", 40, 100)
    assert to_evict([gone, held], version("x", 0, 0), 130 * MIB, 160 * MIB) == [held]


def test_a_version_larger_than_the_budget_can_never_fit() -> None:
    assert too_big(100 * MIB, 160 * MIB) == ""
    assert too_big(100 * MIB, 0) == ""  # no budget
    assert "200.0 MiB, more than the whole memory budget of 160.0 MiB" in too_big(
        200 * MIB, 160 * MIB
    )
