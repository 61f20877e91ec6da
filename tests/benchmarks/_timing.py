"""Wall-clock timing the benchmarks share: a call's seconds, the device synchronised around it."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import torch


def median_seconds(
    fn: Callable[[], object], device: torch.device, repeat: int = 1, warmups: int = 1
) -> float:
    """The median seconds of ``repeat`` calls of ``fn`` after ``warmups`` untimed ones (a CUDA graph's
    capture, a kernel's first compile), CUDA synchronised before and after each timed call."""
    for _ in range(warmups):
        fn()
    times = []
    for _ in range(repeat):
        if device.type == "cuda":
            torch.cuda.synchronize()
        t = time.perf_counter()
        fn()
        if device.type == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t)
    return statistics.median(times)
