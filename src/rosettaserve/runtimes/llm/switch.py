"""The interpreter's switch interval while generation engines run.

The event loop must get the interpreter back within a fraction of a step when a request
arrives: an engine thread holds it between tensor operations, and with CPython's default
switch interval (5 ms) the loop could wait two steps' time.
"""

from __future__ import annotations

import sys
import threading

# The process's switch interval while an engine runs.
SWITCH_INTERVAL_S = 0.0005


class SwitchInterval:
    """The process's switch interval is ``SWITCH_INTERVAL_S`` while any engine runs, and what it
    was before once the last one stops (a server whose LLM unloads serves on as before)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._running = 0
        self._before = sys.getswitchinterval()

    def engine_started(self) -> None:
        with self._lock:
            if self._running == 0:
                self._before = sys.getswitchinterval()
                if self._before > SWITCH_INTERVAL_S:
                    sys.setswitchinterval(SWITCH_INTERVAL_S)
            self._running += 1

    def engine_stopped(self) -> None:
        with self._lock:
            if self._running == 0:
                return
            self._running -= 1
            if self._running == 0:
                sys.setswitchinterval(self._before)
