"""Keep freed memory in the process: the allocator setting a long simulation runs with.

FedAvg on PersonalFR's autoencoder moves a 3.7 MB model through every client each round: the
client's copy, its encoded update, the server's sum. glibc's malloc serves blocks that large
with fresh ``mmap`` pages and gives them back on ``free`` (or trims the heap's top back to the
kernel), so every message paid a page fault per 4 KiB page it touched: a third of a Table IV
FedAvg run was system time (docs/performance.md, "Allocator"). :func:`keep_freed_memory` raises
the thresholds (``mallopt``) so that such blocks come from the heap and freed ones stay there to
be reused. It changes nothing but speed and how much memory the process keeps mapped.

Called by the ``fedsim`` command and by the workers of ``fedsim.studies.parallel``; a program
that drives fedsim itself may call it first. ``FEDSIM_MALLOC=default`` leaves the allocator as
it is.
"""

from __future__ import annotations

import ctypes
import os
import sys

__all__ = ["keep_freed_memory", "MMAP_THRESHOLD", "TRIM_THRESHOLD"]

MMAP_THRESHOLD = 32 * 1024 * 1024  # blocks below this come from the heap (glibc's largest allowed value)
TRIM_THRESHOLD = 512 * 1024 * 1024  # free memory at the heap's top kept up to this much
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # mallopt's parameter numbers (malloc.h)
_done: str | None = None


def keep_freed_memory() -> str:
    """Set glibc's malloc thresholds (once per process; later calls return the first answer).
    Returns what was done: ``"set"``, or why nothing was (not glibc, ``FEDSIM_MALLOC=default``,
    ``mallopt`` refused). Never raises."""
    global _done
    if _done is not None:
        return _done
    _done = _set()
    return _done


def _set() -> str:
    if os.environ.get("FEDSIM_MALLOC", "").strip().lower() == "default":
        return "left as it is (FEDSIM_MALLOC=default)"
    if not sys.platform.startswith("linux"):
        return f"not glibc ({sys.platform})"
    try:
        # the process's own symbols: the malloc it runs with, found without
        # ctypes.util.find_library, which runs /sbin/ldconfig in a subprocess on every start
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError) as exc:
        return f"no mallopt in the C library ({exc})"
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    if not (mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD) and mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD)):
        return "mallopt refused the thresholds"
    return "set"
