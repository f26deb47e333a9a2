"""SIGTERM ends the process even when a model call blocks the event loop itself.

The server stops from its event loop (drain, unload, exit), and a synchronous predict known to be
fast runs on the loop's own thread (``core.invoker``): should such a call hang, the loop never
sees the signal. Python runs a signal's handler in the main thread even while that thread waits
on a lock or sleeps, so the handler installed here arms a timer there: if the process has not
exited ``MARGIN_S`` after the drain grace, it exits then, with status 0 (the status of a normal
stop) and a line on stderr saying why. The loop's own handling of the signal is kept: this
handler calls the one it replaces.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable, Iterable
from types import FrameType
from typing import Any

MARGIN_S = 10.0  # past the drain grace: the normal stop has this long to finish unloading


def arm(signals: Iterable[signal.Signals], grace_s: float) -> None:
    """Install the backstop for ``signals``; call it after the event loop's handlers are set."""
    armed = threading.Event()
    for sig in signals:
        previous = signal.getsignal(sig)

        def handler(signum: int, frame: FrameType | None, previous: Any = previous) -> None:
            if not armed.is_set():
                armed.set()
                start = threading.Thread(
                    target=_exit_after, args=(grace_s + MARGIN_S,), name="exit-backstop"
                )
                start.daemon = True
                start.start()
            if callable(previous):
                chained: Callable[[int, FrameType | None], Any] = previous
                chained(signum, frame)

        signal.signal(sig, handler)


def _exit_after(delay_s: float) -> None:
    time.sleep(delay_s)
    os.write(
        2,
        b"rosettaserve: the server did not stop within the drain grace (a model call blocks "
        b"its event loop): exiting now\n",
    )
    os._exit(0)
