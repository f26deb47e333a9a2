"""Python's cyclic garbage collector around startup.

Importing the server and the runtimes (numpy, grpc, onnxruntime, scikit-learn's scipy...) and
loading the models builds a few hundred thousand objects, and the collector, triggered by every
700 allocations, scans them again and again while finding almost nothing to free: turning it off
until the models are loaded takes ~10% off the import of scikit-learn. Once they are,
``gc.freeze`` moves everything (the modules and the models, alive for the life of the process)
out of every later collection: a full collection over them took ~0.12 s, a pause requests would
otherwise wait through now and then.

No collection runs before the freeze. With the tensor examples loaded it would scan ~200,000
objects to free ~1,250 (~0.4 MB of startup's cycles: functions, tuples, cells of modules built
and dropped), and it ran on the event loop between the last model loading and the first ready
answer: 0.08-0.13 s of every start. Those few cycles are frozen with the rest and kept instead.
Set ROSETTASERVE_GC_TUNING=0 to keep Python's defaults.
"""

from __future__ import annotations

import gc
import os


def _enabled() -> bool:
    return os.environ.get("ROSETTASERVE_GC_TUNING") != "0"


def pause() -> bool:
    """Before the imports: no collections until ``settle``. True if paused."""
    if not _enabled():
        return False
    gc.disable()
    return True


def settle() -> None:
    """The models are loaded: freeze what startup built, collect as usual from now on."""
    if not _enabled():
        return
    gc.freeze()
    gc.enable()
