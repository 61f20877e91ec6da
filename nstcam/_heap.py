"""glibc's malloc told to keep what a tiled pass frees, so that the next tile takes it back without
the kernel's page faults (issue 76).

A tiled pass allocates and frees the same tensors tile after tile. By default glibc serves every
block past a threshold (which starts at 128 KiB and follows the largest freed block up to 32 MiB)
by a fresh ``mmap``, and gives the top of its heap back to the kernel once more than twice that
threshold lies free there; each tile then pays the kernel to zero every page again. Measured here
by a one-off script, not kept (``FastStyle.stylize`` of the 26-style network at 4096 x 2724 in
512 px tiles, 2 cores, the thresholds below set or not through ``GLIBC_TUNABLES``): 19.9 s by
default, 11.9 s with them, the same bits. ``bench_print.py --one-pass`` measures the whole change.

:func:`keep_freed` sets both thresholds once per process: blocks under 32 MiB come from the heap
(the tiles are sized so that their tensors are: ``nstcam.fast._tiled.auto_tile``), and up to
``KEEP`` bytes freed at the heap's top stay with the process. Elsewhere (not glibc) it does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import threading

__all__ = ["KEEP", "MMAP_THRESHOLD", "keep_freed"]

logger = logging.getLogger(__name__)

MMAP_THRESHOLD = 32 << 20
"""Blocks at least this large are mmapped (glibc's largest dynamic threshold, fixed)."""
KEEP = 256 << 20
"""Bytes freed at the heap's top that stay with the process (glibc's trim threshold)."""
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # <malloc.h>

_lock = threading.Lock()
_state: dict[str, bool] = {}


def keep_freed() -> bool:
    """Sets glibc's mmap and trim thresholds (once per process); True where they are set."""
    with _lock:
        if "set" not in _state:
            _state["set"] = _mallopt({_M_MMAP_THRESHOLD: MMAP_THRESHOLD, _M_TRIM_THRESHOLD: KEEP})
        return _state["set"]


def _mallopt(settings: dict[int, int]) -> bool:
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        logger.debug("no glibc mallopt here: the heap keeps its own thresholds")
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    ok = all(mallopt(param, value) == 1 for param, value in settings.items())
    logger.debug("glibc malloc: mmap threshold %d, trim threshold %d: %s", MMAP_THRESHOLD, KEEP, ok)
    return ok
