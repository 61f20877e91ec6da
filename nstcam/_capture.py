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

__all__ = [
    "CAPTURE_LOCK",
    "CheckRecord",
    "adopt_cudagraph_trees",
    "capture_turn",
    "error_of_max",
    "raised",
    "tf32_in_use",
    "torch_capture_lock",
]

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


def adopt_cudagraph_trees() -> bool:
    """Gives the calling thread torch.compile's CUDA-graph trees, where this torch leaves them to the
    thread that imported them. Returns whether it had to (False: the thread had them already).

    ``torch._inductor.cudagraph_trees`` keeps its tree managers in thread-local state, set up on the
    thread that imports it and handed to that thread's autograd workers. Up to torch 2.13 a compiled
    ``reduce-overhead`` call from any other thread fails on a bare ``assert
    torch._C._is_key_in_tls(...)`` (seen on torch 2.11 on an H200: every compiled style step raised it,
    since its owner thread, ``style/_owner.py``, is never the importing one); 2.14 sets the state up
    for each new thread itself. This does what 2.14 does, on the calling thread: its own (empty) tree
    managers, stashed so that its backward passes find them. Call it on the thread that runs the
    compiled calls, before the first.
    """
    try:
        from torch._inductor import cudagraph_trees as trees
    except ImportError:  # no inductor: nothing to adopt
        return False
    local = getattr(trees, "local", None)
    if local is None or hasattr(local, "tree_manager_containers"):
        return False
    if torch._C._is_key_in_tls("tree_manager_containers"):  # an autograd worker of a thread that has them
        return False
    setup = getattr(trees, "_initialize_tls", None)
    if setup is not None:
        setup(local)
        return True
    import collections

    local.tree_manager_containers = {}
    local.tree_manager_locks = collections.defaultdict(threading.Lock)
    torch._C._stash_obj_in_tls("tree_manager_containers", local.tree_manager_containers)
    torch._C._stash_obj_in_tls("tree_manager_locks", local.tree_manager_locks)
    return True


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


def tf32_in_use(device: torch.device | str) -> bool:
    """Whether float32 convolutions or matrix products on ``device`` may run in TF32 (10-bit mantissa):
    an NVIDIA GPU of compute capability 8.0 or newer with ``torch.backends.cudnn.allow_tf32`` (torch's
    default) or a float32 matmul precision below "highest". Read when a self-check compares, so a flag
    changed later counts. Two passes of the same network then differ wherever cuDNN picks other
    algorithms (inductor's layouts, the workspace left under load): the engines' self-checks judge
    them by their TF32 tolerances (``style/_selfcheck.py``, ``cam/_graphed.py``)."""
    device = torch.device(device)
    if device.type != "cuda" or not torch.cuda.is_available():
        return False
    if torch.cuda.get_device_capability(device) < (8, 0):
        return False
    return bool(torch.backends.cudnn.allow_tf32) or torch.get_float32_matmul_precision() != "highest"


def raised(e: BaseException) -> str:
    """How a failed compiled or graphed call is reported: the exception, its message's first line, and
    where it was raised (the innermost frame, as ``package/file.py:line``: torch's bare asserts say
    nothing else). Never a whole path."""
    import traceback

    frames = traceback.extract_tb(e.__traceback__)
    where = ""
    if frames:
        last = frames[-1]
        parts = last.filename.replace("\\", "/").split("/")
        where = f" at {'/'.join(parts[-2:])}:{last.lineno}"
    message = str(e).strip().splitlines()[0][:300] if str(e).strip() else ""
    return f"it raised {type(e).__name__}{where}" + (f": {message}" if message else "")


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
