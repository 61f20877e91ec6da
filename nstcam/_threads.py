"""Torch's CPU threads sized, call by call, to the cores actually free (issue 62).

Torch starts with one OpenMP thread per core and keeps it. On a shared machine (a public Space: other
processes, several users' requests at once) that count oversubscribes the cores: OpenMP's threads wait
for each other at every barrier: the 26-style network's 512 px pass, 0.21 s with 2 threads on 2 idle
cores, took 0.45 s with 2 threads and 0.30 s with 1 while another process kept one core busy
(``tests/benchmarks/bench_fast_cpu.py``).

:func:`sized_threads` gives the calling thread, for one call, as many threads as there are cores
free: the cores this process may use (its CPU affinity, and its cgroup's CPU quota where one is
set), less what other processes used over the last ~0.3 s (``/proc/stat``, or the cgroup's
``cpu.stat``, less this process's own CPU time), shared among this process's calls that are inside
:func:`sized_threads` at the same time, and never more than torch's own count (``OMP_NUM_THREADS``,
``torch.set_num_threads``). A sampler thread reads those counters every 0.1 s, so a call never waits
for a measurement.

Only the calling thread's count changes (OpenMP's and MKL's per-thread settings, through the libgomp
and the MKL that torch loaded): no other call sees it, and it is restored on the way out. Where those
libraries cannot be found, or off Linux, the call runs with torch's count as it is.
"""

from __future__ import annotations

import collections
import ctypes
import functools
import glob
import logging
import math
import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import torch

from nstcam._lapack import _mkl_set_local

__all__ = ["cores", "free_cores", "one_thread", "sized_threads", "threads_for_call"]

logger = logging.getLogger(__name__)

_PERIOD_S = 0.1
_WINDOW = 4  # readings: the last ~0.3 s
_CGROUP = Path("/sys/fs/cgroup")


@functools.cache
def cores() -> int:
    """The cores this process may use: its CPU affinity, capped by its cgroup's quota (``cpu.max``)."""
    try:
        n = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        n = os.cpu_count() or 1
    try:
        quota, period = (_CGROUP / "cpu.max").read_text().split()[:2]
        if quota != "max":
            n = min(n, max(1, math.ceil(int(quota) / int(period))))
    except (OSError, ValueError):
        pass
    return max(1, n)


def _busy_s() -> float | None:
    """CPU seconds used so far by everything this process shares its cores with (the cgroup where
    it has a quota, else the whole machine), or None where that cannot be read."""
    try:
        if (_CGROUP / "cpu.max").is_file() and (_CGROUP / "cpu.max").read_text().split()[0] != "max":
            for line in (_CGROUP / "cpu.stat").read_text().splitlines():
                if line.startswith("usage_usec"):
                    return int(line.split()[1]) / 1e6
        fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
        ticks = [int(v) for v in fields]
        # user nice system idle iowait irq softirq steal (guest time is inside user already)
        return (sum(ticks[:8]) - ticks[3] - ticks[4]) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


def _own_s() -> float:
    t = os.times()
    return t.user + t.system


class _Sampler:
    """Reads (time, busy CPU s, own CPU s) every 0.1 s in a daemon thread; started on first use, and
    again in a forked child (threads do not survive a fork)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._readings: collections.deque = collections.deque(maxlen=_WINDOW)
        self._pid = -1

    def _read(self) -> tuple[float, float, float] | None:
        busy = _busy_s()
        return None if busy is None else (time.monotonic(), busy, _own_s())

    def _run(self, pid: int) -> None:
        while self._pid == pid:
            reading = self._read()
            if reading is None:
                return
            with self._lock:
                self._readings.append(reading)
            time.sleep(_PERIOD_S)

    def others_busy(self) -> float | None:
        """Cores kept busy by other processes over the last readings' window (None: not known yet)."""
        with self._lock:
            if self._pid != os.getpid():
                self._pid = os.getpid()
                self._readings.clear()
                threading.Thread(target=self._run, args=(self._pid,), name="nstcam-cpu", daemon=True).start()
            if len(self._readings) < 2:
                return None
            (t0, b0, o0), (t1, b1, o1) = self._readings[0], self._readings[-1]
        if t1 - t0 <= 0:
            return None
        return max(0.0, ((b1 - b0) - (o1 - o0)) / (t1 - t0))


_SAMPLER = _Sampler()
_ACTIVE = [0]
_ACTIVE_LOCK = threading.Lock()
_LOCAL = threading.local()


def free_cores() -> float:
    """This process's cores less those other processes kept busy over the last ~0.3 s (all of them
    while that is not known yet)."""
    busy = _SAMPLER.others_busy()
    return float(cores()) if busy is None else max(0.0, cores() - busy)


def threads_for_call(free: float, active: int, limit: int) -> int:
    """Threads for one of ``active`` concurrent calls sharing ``free`` cores: at least 1, at most
    ``limit`` (a core counts when at least 70% of it is free)."""
    return max(1, min(limit, math.floor(free / max(1, active) + 0.3)))


@functools.cache
def _omp_set() -> Callable[[int], None] | None:
    """libgomp's ``omp_set_num_threads`` (a per-thread setting) as loaded by torch, or None."""
    noload = getattr(os, "RTLD_NOLOAD", None)
    if noload is None:
        return None
    for path in sorted(glob.glob(os.path.join(os.path.dirname(torch.__file__), "lib", "libgomp*.so*"))):
        try:
            fn = ctypes.CDLL(path, mode=noload).omp_set_num_threads
        except (OSError, AttributeError):
            continue
        fn.argtypes, fn.restype = [ctypes.c_int], None
        return fn
    return None


@contextmanager
def sized_threads() -> Iterator[int]:
    """Inside the block, the calling thread runs torch's CPU work on as many threads as there are cores
    free (see the module's docstring); yields that count. Nested blocks keep the outer one's count."""
    depth = getattr(_LOCAL, "depth", 0)
    omp = _omp_set()
    if depth or omp is None:
        _LOCAL.depth = depth + 1
        try:
            yield torch.get_num_threads()
        finally:
            _LOCAL.depth = depth
        return
    before = torch.get_num_threads()  # also torch's lazy per-thread setup, done before ours
    with _ACTIVE_LOCK:
        _ACTIVE[0] += 1
        active = _ACTIVE[0]
    n = threads_for_call(free_cores(), active, min(cores(), before))  # never more than torch was told
    mkl = _mkl_set_local()
    old_mkl = mkl(n) if mkl is not None else None
    omp(n)
    _LOCAL.depth = 1
    try:
        yield n
    finally:
        _LOCAL.depth = 0
        omp(before)
        if mkl is not None:
            mkl(old_mkl)
        with _ACTIVE_LOCK:
            _ACTIVE[0] -= 1


@contextmanager
def one_thread() -> Iterator[None]:
    """The calling thread's OpenMP work on one thread inside the block: for a reduction whose bits
    would otherwise depend on how many threads split it (a result must not depend on the load that
    sized its call). Nothing changes where torch's libgomp cannot be found."""
    omp = _omp_set()
    if omp is None:
        yield
        return
    before = torch.get_num_threads()
    omp(1)
    try:
        yield
    finally:
        omp(before)
