"""glibc malloc thresholds for a server that moves megabyte-sized tensors.

By default glibc serves each allocation over 128 KiB (a threshold that adapts upwards only after
frees) with its own mmap, and returns it with munmap when freed: every 1 MiB request body,
array and response then costs fresh pages, faulted in and zeroed, on every request. Raising the
mmap threshold keeps such buffers in the heap, where the next request reuses them; raising the
trim threshold stops the heap from being handed back after each request. The resident size
settles at the peak working set instead of shrinking between requests.

Set MALLOC_MMAP_THRESHOLD_ or MALLOC_TRIM_THRESHOLD_ (glibc's own variables) to choose other
values, or ROSETTASERVE_MALLOC_TUNING=0 to leave glibc's defaults.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys

M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 32 * 1024 * 1024  # glibc's maximum for this setting on 64-bit is 32 MiB
TRIM_THRESHOLD = 256 * 1024 * 1024


def tune() -> bool:
    """Apply the thresholds (glibc only); True if they were set."""
    if not sys.platform.startswith("linux") or os.environ.get("ROSETTASERVE_MALLOC_TUNING") == "0":
        return False
    if "MALLOC_MMAP_THRESHOLD_" in os.environ or "MALLOC_TRIM_THRESHOLD_" in os.environ:
        return False  # the user chose: glibc read them at start
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name)
        mallopt = libc.mallopt
    except (OSError, AttributeError, TypeError):
        return False  # not glibc (musl has no mallopt)
    return bool(
        mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD) and mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD)
    )
