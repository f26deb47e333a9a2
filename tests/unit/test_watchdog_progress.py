"""The progress watch (repository/watchdog.py) on an LLM engine's counters: sequences waiting and
no token or prefill for the stall timeout make the version not ready, saying why; a token makes
it ready again; an idle engine, or one another watch made not ready, is left alone."""

from __future__ import annotations

from types import SimpleNamespace

from rosettaserve.core.registry import ModelVersion, VersionState
from rosettaserve.repository.watchdog import check_progress


def llm_version() -> tuple[ModelVersion, SimpleNamespace]:
    stats = SimpleNamespace(tokens=0, prefills=0, running=2, waiting=1)
    mv = ModelVersion(name="tiny_llama", version="1", runtime="llm", state=VersionState.READY)
    mv.model = SimpleNamespace(engine=SimpleNamespace(stats=stats))  # type: ignore[assignment]
    mv.inflight = 3
    return mv, stats


def state(mv: ModelVersion) -> VersionState:
    return mv.state  # (read through a call: the checks change it behind mypy's narrowing)


def test_an_engine_that_generates_nothing_while_sequences_wait_is_not_ready() -> None:
    mv, stats = llm_version()
    check_progress(mv, 100.0, 30.0)
    check_progress(mv, 129.0, 30.0)
    assert mv.state is VersionState.READY  # not yet 30 s
    check_progress(mv, 131.0, 30.0)
    assert state(mv) is VersionState.UNAVAILABLE
    assert mv.reason.startswith("no progress: its engine generated nothing for 31 s while 3 ")
    stats.tokens += 1
    check_progress(mv, 132.0, 30.0)
    assert (mv.state, mv.reason) == (VersionState.READY, "")


def test_an_idle_engine_is_ready_however_long() -> None:
    mv, stats = llm_version()
    stats.running = stats.waiting = 0
    check_progress(mv, 100.0, 30.0)
    check_progress(mv, 1000.0, 30.0)
    assert mv.state is VersionState.READY
    mv.inflight, stats.running = 0, 2  # (counters left from the last step, no request in flight)
    check_progress(mv, 2000.0, 30.0)
    assert mv.state is VersionState.READY


def test_a_version_another_watch_made_unavailable_is_left_to_it() -> None:
    mv, stats = llm_version()
    check_progress(mv, 100.0, 30.0)
    mv.state, mv.reason, mv.stalled_since = VersionState.UNAVAILABLE, "stuck instances", 1.0
    check_progress(mv, 200.0, 30.0)
    assert mv.reason == "stuck instances"
    stats.tokens += 1
    check_progress(mv, 201.0, 30.0)
    assert (mv.state, mv.reason) == (VersionState.UNAVAILABLE, "stuck instances")
