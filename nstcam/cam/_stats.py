"""Means with bootstrap intervals, and ranks that tie where intervals overlap: how the trust report
compares methods and ``target_layer="auto"`` compares layers."""

from __future__ import annotations

import numpy as np

__all__ = ["TIE", "bootstrap_mean", "interval_ranks"]

TIE = 1e-6
"""Intervals closer than this count as overlapping (one image's "intervals" are points: float noise
between two equal maps ranks nothing)."""


def bootstrap_mean(values: np.ndarray, rounds: int, seed: int) -> tuple[float, float, float]:
    """Mean and the 2.5 and 97.5 percentiles of the bootstrapped mean (resampled images)."""
    rng = np.random.default_rng(seed)
    means = values[rng.integers(0, len(values), size=(rounds, len(values)))].mean(1)
    return float(values.mean()), float(np.percentile(means, 2.5)), float(np.percentile(means, 97.5))


def interval_ranks(cis: dict[str, tuple[float, float, float]], higher: bool) -> dict[str, int]:
    """1 + the number of entries whose whole interval is better than this one's: overlaps tie."""
    out = {}
    for m, (_, lo, hi) in cis.items():
        better = [o for o, (_, olo, ohi) in cis.items() if (olo > hi + TIE if higher else ohi < lo - TIE)]
        out[m] = 1 + len(better)
    return out
