"""The trace and logging extensions' settings (observability/trace_settings.py, log_settings.py):
sampling by rate and count, a model's settings over the server's, values checked before any
applies, and paths a client names refused."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from rosettaserve.core.errors import InvalidInput, Unsupported
from rosettaserve.observability.log_settings import LevelGate, LogSettings, checked
from rosettaserve.observability.trace_settings import TraceSettings


def test_rate_and_count_decide_which_requests_are_traced() -> None:
    traces = TraceSettings(exporting=True)
    traces.update("m", {"trace_rate": "3", "trace_count": "2"})
    assert [traces.sampled("m") for _ in range(7)] == [True, False, False, True] + [False] * 3
    assert traces.document("m")["trace_count"] == "0"
    assert traces.document()["trace_count"] == "-1"  # the server's own are untouched
    assert all(traces.sampled("other") for _ in range(3))


def test_a_null_gives_a_setting_back_to_the_servers() -> None:
    traces = TraceSettings(exporting=True)
    traces.update("m", {"trace_level": ["OFF"]})
    assert not traces.sampled("m")
    traces.update("", {"trace_rate": "2"})
    assert traces.document("m")["trace_rate"] == "1"  # copied when the model's were made
    traces.update("m", {"trace_level": None, "trace_rate": None})
    assert traces.document("m") == traces.document()


@pytest.mark.parametrize(
    ("settings", "error"),
    [
        ({"trace_file": "/tmp/x"}, Unsupported),
        ({"trace_level": ["OFF", "TENSORS"]}, InvalidInput),
        ({"trace_rate": "0"}, InvalidInput),
        ({"trace_rate": True}, InvalidInput),
        ({"trace_count": ["-2"]}, InvalidInput),
        ({"log_frequency": "x"}, InvalidInput),
    ],
)
def test_bad_trace_settings_change_nothing(settings: dict[str, Any], error: type) -> None:
    traces = TraceSettings(exporting=True)
    before = traces.document()
    with pytest.raises(error):
        traces.update("", {"trace_rate": "5", **settings})
    assert traces.document() == before


def test_without_an_exporter_no_level_can_be_set() -> None:
    traces = TraceSettings(exporting=False)
    assert traces.document()["trace_level"] == ["OFF"]
    with pytest.raises(Unsupported):
        traces.update("", {"trace_level": ["TIMESTAMPS"]})
    assert not traces.sampled("m")


@pytest.mark.parametrize(
    ("settings", "error"),
    [
        ({"log_file": ""}, Unsupported),
        ({"log_file": "/etc/passwd"}, Unsupported),
        ({"log_info": 1}, InvalidInput),
        ({"log_verbose_level": True}, InvalidInput),
        ({"log_verbose_level": -1}, InvalidInput),
        ({"log_format": ["json"]}, InvalidInput),
    ],
)
def test_bad_log_settings_are_refused(settings: dict[str, Any], error: type) -> None:
    with pytest.raises(error):
        checked(settings)


def test_log_settings_start_from_the_command_line() -> None:
    logs = LogSettings("warning", "json")
    assert logs.document() == {
        "log_file": "",
        "log_info": False,
        "log_warning": True,
        "log_error": True,
        "log_verbose_level": 0,
        "log_format": "json",
    }


def test_the_gate_drops_the_levels_switched_off() -> None:
    gate = LevelGate()
    gate.off = frozenset({logging.INFO, logging.ERROR})

    def passes(level: int) -> bool:
        return gate.filter(logging.LogRecord("x", level, "", 0, "", (), None))

    assert [passes(lv) for lv in (10, 20, 30, 40, 50)] == [True, False, True, False, False]
