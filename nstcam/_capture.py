"""What the two engines' CUDA-graph paths share: one process-wide capture lock and the self-check's record.

**The lock.** A CUDA graph capture is a process-wide state of the device: another thread's
synchronisation or allocator-pool switch during it invalidates it (torch guards its own recordings
with ``torch._inductor.cudagraph_trees.graph_capture_lock`` for that reason). Two paths capture
here: the Grad-CAM graphs (``nstcam/cam/_graphed.py``, in request threads) and the compiled style
step, whose first calls per key warm up and record its CUDA graphs (``nstcam/style/_compiled.py``,
on the engine's owner thread). Both take :data:`CAPTURE_LOCK` around those moments, so they never
overlap; a Grad-CAM capture also takes torch's own lock (:func:`torch_capture_lock`), since its
capture is not torch.compile's. Order: ours first, then torch's (torch takes its own inside the
compiled step's calls), so the two locks cannot deadlock. A Grad-CAM capture that finds the lock
held does not wait (a style compile can take a minute): that call runs eagerly, and the key is
captured when it comes again.

**The record.** Each compiled or graphed key is compared with the eager pass before it serves
(see each engine's module); :class:`CheckRecord` counts those checks, the mismatches, and the
largest relative error seen.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

import torch

__all__ = ["CAPTURE_LOCK", "CheckRecord", "capture_turn", "error_of_max", "torch_capture_lock"]

CAPTURE_LOCK = threading.RLock()
"""One capture (or first calls of a compiled key) at a time in the process."""


def torch_capture_lock() -> contextlib.AbstractContextManager:
    """torch's own lock around its CUDA-graph recordings where this torch has one (2.14+), else a
    no-op. Imported on demand: it lives in inductor, which a CPU-only process never needs."""
    try:
        from torch._inductor.cudagraph_trees import graph_capture_lock
    except (ImportError, AttributeError):
        return contextlib.nullcontext()
    return graph_capture_lock


@contextlib.contextmanager
def capture_turn(blocking: bool = True) -> Iterator[bool]:
    """Holds :data:`CAPTURE_LOCK` for the block; yields False (without it) where ``blocking`` is
    False and another thread holds it."""
    got = CAPTURE_LOCK.acquire(blocking=blocking)
    try:
        yield got
    finally:
        if got:
            CAPTURE_LOCK.release()


def error_of_max(got: torch.Tensor, want: torch.Tensor) -> float:
    """``max |got - want| / max |want|`` in float64 (0 where both are zero); inf where ``got`` is
    not finite."""
    got, want = got.detach().double(), want.detach().double()
    if not bool(torch.isfinite(got).all()):
        return float("inf")
    if got.shape != want.shape:
        return float("inf")
    diff = float((got - want).abs().max()) if got.numel() else 0.0
    scale = float(want.abs().max()) if want.numel() else 0.0
    return diff / scale if scale > 0 else (0.0 if diff == 0 else float("inf"))


class CheckRecord:
    """Self-checks of compiled or graphed keys against eager: ``checked`` comparisons, the keys found
    wrong (``mismatches``), and the largest relative error of any comparison (``max_rel_err``).
    Threads may add at once."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.checked = 0
        self.mismatches = 0
        self.max_rel_err = 0.0

    def add(self, error: float) -> None:
        """One comparison and its relative error (inf: not finite, or the compiled side raised)."""
        with self._lock:
            self.checked += 1
            self.max_rel_err = max(self.max_rel_err, error)

    def mismatch(self) -> None:
        """A key found wrong (it runs eagerly from then on)."""
        with self._lock:
            self.mismatches += 1

    def as_dict(self) -> dict[str, float]:
        return {"checked": self.checked, "mismatches": self.mismatches, "max_rel_err": self.max_rel_err}
