"""Symmetric eigendecompositions that cost the same, and give the same bits, from any thread.

torch's CPU ``eigh`` (MKL's LAPACK) runs as thousands of small OpenMP regions. Once a second thread
has run OpenMP work (the app's workers, an API user's thread pool, a compiling style engine's owner
thread), the process holds more OpenMP threads than cores, libgomp stops spinning between regions,
and each region waits for a wake-up. ``bench_style_losses.py --eigh`` (2 cores): a 256 x 256
``eigh`` took 1.9 ms on the main thread and 23.1 ms in a worker; a 512 x 512 one, after the worker
had run, 55.7 ms on the main thread and 62.4 ms in the worker; with one MKL thread 2.4 and 11 ms
from either. :func:`eigh` gives the calling thread one MKL thread for the call: MKL's thread-local
count, the one ``torch.set_num_threads`` sets for its calling thread (torch exposes it only with a
process-wide side effect). On the main thread too, since the count of threads changes the rounding
and a run's result must not depend on the thread that computed it (threads equal sequential).

NumPy's LAPACK (OpenBLAS) was as fast alone, but its own spinning threads slowed the convolutions
around it (in a trial, not kept here) by more than it saved. Without MKL (or its symbol) this is
torch's ``eigh``, as is.
"""

from __future__ import annotations

import ctypes
import functools
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import torch

__all__ = ["eigh", "single_threaded"]


@functools.cache
def _mkl_set_local() -> Callable[[int], int] | None:
    """MKL's ``mkl_set_num_threads_local`` in the loaded torch, or None where there is none."""
    noload = getattr(os, "RTLD_NOLOAD", None)
    if noload is None or not torch.backends.mkl.is_available():
        return None
    try:  # loaded by ``import torch`` already: RTLD_NOLOAD only finds it
        path = os.path.join(os.path.dirname(torch.__file__), "lib", "libtorch_cpu.so")
        lib = ctypes.CDLL(path, mode=noload)
        fn = lib.MKL_Set_Num_Threads_Local
    except (OSError, AttributeError):
        return None
    fn.argtypes, fn.restype = [ctypes.c_int], ctypes.c_int
    return fn


@contextmanager
def single_threaded() -> Iterator[None]:
    """One MKL thread for the calling thread inside the block (nothing without MKL)."""
    fn = _mkl_set_local()
    if fn is None:
        yield
        return
    # torch sets each thread's MKL count the first time the thread asks for its count: done now, so
    # that it cannot overwrite this block's setting inside the block
    torch.get_num_threads()
    old = fn(1)  # the thread's previous setting (0: MKL's global one), restored after
    try:
        yield
    finally:
        fn(old)


def eigh(m: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``torch.linalg.eigh(m)`` (differentiable as it is), with one MKL thread (only the CPU's uses MKL)."""
    with single_threaded():
        return torch.linalg.eigh(m)
