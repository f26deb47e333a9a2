"""Triton's logging extension (``GET``/``POST /v2/logging``, gRPC ``LogSettings``): the server's
log settings, read and changed while it runs.

- ``log_info``, ``log_warning``, ``log_error``: each level's lines on or off (ERROR covers
  CRITICAL); ``log_verbose_level`` > 0: DEBUG lines too (any level above 0 is all of them).
  Access lines are INFO lines: ``log_info: false`` stops them as well.
- ``log_format``: ``default`` (text lines, ``--log-format text``) or ``json``.
- ``log_file`` is always "" (the lines go to stderr). A request naming a file is refused, as
  Triton refuses it: the server never opens a path a client gives.
- Each process has its own settings: with ``--workers``, a request changes the worker that
  answers it.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from rosettaserve.core.errors import InvalidInput, Unsupported
from rosettaserve.observability import logging_setup

SWITCHES = {"log_info": logging.INFO, "log_warning": logging.WARNING, "log_error": logging.ERROR}
FORMATS = {"default": "text", "json": "json"}  # Triton's name (and ours) -> --log-format's


class LevelGate(logging.Filter):
    """Drops the records of the levels switched off (DEBUG, INFO, WARNING, ERROR and above)."""

    def __init__(self) -> None:
        super().__init__()
        self.off: frozenset[int] = frozenset()

    def filter(self, record: logging.LogRecord) -> bool:
        return _kind(record.levelno) not in self.off


def _kind(level: int) -> int:
    for kind in (logging.ERROR, logging.WARNING, logging.INFO):
        if level >= kind:
            return kind
    return logging.DEBUG


class LogSettings:
    """This process's log settings, as the logging extension reads and writes them."""

    def __init__(self, level: str, fmt: str, tag: str = "") -> None:
        start = logging.getLevelName(level.upper())
        start = start if isinstance(start, int) else logging.INFO
        self.on = {name: start <= kind for name, kind in SWITCHES.items()}
        self.verbose = 1 if start <= logging.DEBUG else 0
        self.format = "json" if fmt == "json" else "default"
        self.tag = tag
        self.gate = LevelGate()

    def document(self) -> dict[str, Any]:
        return {
            "log_file": "",
            **self.on,
            "log_verbose_level": self.verbose,
            "log_format": self.format,
        }

    def update(self, settings: Mapping[str, Any]) -> dict[str, Any]:
        """Every setting given checked first (nothing changes if one is wrong), then applied;
        unknown names are ignored, as Triton ignores them. The settings after it."""
        changes = checked(settings)
        for name in SWITCHES:
            if name in changes:
                self.on[name] = changes[name]
        self.verbose = changes.get("log_verbose_level", self.verbose)
        self.format = changes.get("log_format", self.format)
        self.apply()
        return self.document()

    def apply(self) -> None:
        """The root logger's handler made again with these settings (its lines so far written)."""
        enabled = [kind for name, kind in SWITCHES.items() if self.on[name]]
        if self.verbose:
            enabled.append(logging.DEBUG)
        lowest = min(enabled, default=logging.CRITICAL)
        for handler in logging.getLogger().handlers:
            handler.flush()
        logging_setup.configure(logging.getLevelName(lowest), FORMATS[self.format], self.tag)
        self.gate.off = frozenset(
            {kind for name, kind in SWITCHES.items() if not self.on[name]}
            | (set() if self.verbose else {logging.DEBUG})
        )
        for handler in logging.getLogger().handlers:
            handler.addFilter(self.gate)
        if not self.on["log_info"]:  # access lines go through logging, and the gate drops them
            logging_setup.ACCESS = None


def checked(settings: Mapping[str, Any]) -> dict[str, Any]:
    """The settings a request changes, each checked (a null value leaves one as it is)."""
    changes: dict[str, Any] = {}
    if settings.get("log_file") is not None:
        raise Unsupported(
            "log_file cannot be set through the logging extension: the server never opens a "
            "file a client names (its log lines go to stderr)"
        )
    for name in SWITCHES:
        value = settings.get(name)
        if value is not None:
            if not isinstance(value, bool):
                raise InvalidInput(f"'{name}' must be a boolean, got {value!r}")
            changes[name] = value
    level = settings.get("log_verbose_level")
    if level is not None:
        if isinstance(level, bool) or not isinstance(level, int) or level < 0:
            raise InvalidInput(f"'log_verbose_level' must be an integer >= 0, got {level!r}")
        changes["log_verbose_level"] = level
    fmt = settings.get("log_format")
    if fmt is not None:
        if not isinstance(fmt, str) or fmt not in FORMATS:
            raise InvalidInput(f"'log_format' must be one of {sorted(FORMATS)}, got {fmt!r}")
        changes["log_format"] = fmt
    return changes
