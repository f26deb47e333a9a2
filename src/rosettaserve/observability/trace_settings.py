"""Triton's trace extension (``/v2[/models/{m}]/trace/setting``, gRPC ``TraceSetting``): which
requests the OpenTelemetry support (``--otel-exporter``, observability/tracing.py) traces.

The settings are the server's, and a model's own once a request sets them (the settings it
does not name copied from the server's then; a null value goes back to the server's):

- ``trace_level``: ``["OFF"]`` traces none of the requests, ``["TIMESTAMPS"]`` (or
  ``TENSORS``, traced the same way: spans carry times, never tensors) traces them;
- ``trace_rate`` N: one request in N is traced (the first, the N+1th, ...);
- ``trace_count``: how many more requests are traced (-1: no limit); each trace counts it down;
- ``log_frequency`` is kept and answered but changes nothing (spans leave through the exporter);
- ``trace_mode`` is ``opentelemetry``; ``trace_file`` is not answered (Triton answers it in its
  own trace mode only), and a request naming one is refused, as Triton refuses it: the server
  never opens a path a client gives.

Without ``--otel-exporter`` the level is ``OFF`` and another one is refused (no span could leave).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rosettaserve.core.errors import InvalidInput, Unsupported

LEVELS = ("OFF", "TIMESTAMPS", "TENSORS")
NAMES = ("trace_level", "trace_rate", "trace_count", "log_frequency")
MODE = "opentelemetry"
UNLIMITED = -1


class TraceSettings:
    """The server's trace settings and the models' own, and the sampling they decide."""

    def __init__(self, exporting: bool) -> None:
        self.exporting = exporting
        self.server: dict[str, Any] = {
            "trace_level": ["TIMESTAMPS"] if exporting else ["OFF"],
            "trace_rate": 1,  # (every request: what --otel-exporter traced before this)
            "trace_count": UNLIMITED,
            "log_frequency": 0,
        }
        self.models: dict[str, dict[str, Any]] = {}  # a model's own values, by name
        self.seen: dict[str, int] = {}  # requests met under each owner's rate ("": server's)

    def effective(self, model: str = "") -> dict[str, Any]:
        return self.server | self.models.get(model, {})

    def document(self, model: str = "") -> dict[str, Any]:
        values = self.effective(model)
        return {
            "trace_level": list(values["trace_level"]),
            "trace_rate": str(values["trace_rate"]),
            "trace_count": str(values["trace_count"]),
            "trace_mode": MODE,
        }

    def update(self, model: str, settings: Mapping[str, Any]) -> dict[str, Any]:
        """Every value checked before any applies; the settings after it (the model's, when
        ``model`` names one). Names it does not know are ignored, as Triton ignores them."""
        changes = checked(settings)
        level = changes.get("trace_level")
        if level and level != ["OFF"] and not self.exporting:
            raise Unsupported(
                "tracing is off: start the server with --otel-exporter console|otlp to trace "
                "requests"
            )
        own = self.models.setdefault(model, dict(self.server)) if model else self.server
        for name, value in changes.items():
            if value is not None:
                own[name] = value
            elif model:
                own.pop(name, None)  # the server's again
        if "trace_rate" in changes:
            self.seen.pop(model, None)
        return self.document(model)

    def sampled(self, model: str) -> bool:
        """Whether this request of ``model`` is traced (its rate and count consumed)."""
        owner = model if model in self.models else ""
        values = self.effective(owner)
        if values["trace_level"] == ["OFF"] or values["trace_count"] == 0:
            return False
        seen = self.seen.get(owner, 0)
        self.seen[owner] = seen + 1
        if seen % values["trace_rate"]:
            return False
        if values["trace_count"] > 0:
            holder = self.models[owner] if owner else self.server
            holder["trace_count"] = values["trace_count"] - 1
        return True


def checked(settings: Mapping[str, Any]) -> dict[str, Any]:
    """The settings a request changes, each checked (None: back to the server's value)."""
    if "trace_file" in settings:
        raise Unsupported(
            "trace_file cannot be set through the trace extension: the server never opens a "
            "file a client names (spans leave through --otel-exporter)"
        )
    changes: dict[str, Any] = {}
    for name in NAMES:
        if name not in settings:
            continue
        value = settings[name]
        changes[name] = None if value is None else _value(name, value)
    return changes


def _value(name: str, value: Any) -> Any:
    if name == "trace_level":
        return _level(value)
    lowest = {"trace_rate": 1, "trace_count": UNLIMITED, "log_frequency": 0}[name]
    number = value[0] if isinstance(value, list) and len(value) == 1 else value
    try:
        parsed = int(number) if isinstance(number, str | int) else None
    except ValueError:
        parsed = None
    if parsed is None or isinstance(number, bool) or parsed < lowest or parsed >= 1 << 31:
        raise InvalidInput(f"Unable to parse '{name}': expected an integer >= {lowest}")
    return parsed


def _level(value: Any) -> list[str]:
    levels = [value] if isinstance(value, str) else value
    if not isinstance(levels, list) or not levels or any(v not in LEVELS for v in levels):
        raise InvalidInput(f"'trace_level' must be a list of {', '.join(LEVELS)}, got {value!r}")
    if "OFF" in levels and len(levels) > 1:
        raise InvalidInput("Expect only one trace level 'OFF' is specified")
    return sorted(set(levels), key=LEVELS.index)
