"""How alike are two saliency maps? Spearman's rank correlation and SSIM, per pair, in float64: the
measures Adebayo et al. 2018 compare maps by in their sanity checks (:mod:`nstcam.metrics.randomisation`).

Maps are (N, H, W), or (N, T, H, W) for clips and volumes (SSIM: per frame, averaged).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from nstcam.metrics.complexity import as_maps

__all__ = ["SIMILARITIES", "average_ranks", "spearman", "ssim"]

SIMILARITIES = ("spearman", "spearman_abs", "ssim")
"""``spearman``: rank correlation; ``spearman_abs``: of the maps' absolute values (the same for
maps >= 0, as CAMs are; kept for signed maps such as raw gradients); ``ssim``: structural similarity."""


def average_ranks(v: torch.Tensor) -> torch.Tensor:
    """(N, n) ranks 0..n-1 of each row's values, ties sharing their mean rank (scipy's ``"average"``)."""
    n = v.shape[1]
    order = v.argsort(dim=1, stable=True)
    sorted_v = v.gather(1, order)
    starts = torch.ones_like(sorted_v, dtype=torch.bool)
    starts[:, 1:] = sorted_v[:, 1:] != sorted_v[:, :-1]
    group = starts.long().cumsum(1) - 1
    pos = torch.arange(n, dtype=torch.float64).expand(v.shape[0], n)
    sums = torch.zeros(v.shape[0], n, dtype=torch.float64).scatter_add_(1, group, pos)
    counts = torch.zeros(v.shape[0], n, dtype=torch.float64).scatter_add_(1, group, torch.ones_like(pos))
    mean = (sums / counts.clamp_min(1)).gather(1, group)
    return torch.empty_like(mean).scatter_(1, order, mean)


def _tensor(maps: Any) -> torch.Tensor:
    t = maps if isinstance(maps, torch.Tensor) else torch.as_tensor(np.asarray(maps))
    return t.detach().cpu().double()


def spearman(a: Any, b: Any, *, absolute: bool = False) -> torch.Tensor:
    """(N,) Spearman rank correlation of each pair of maps, in [-1, 1]; 0 where either map is
    constant (its ranks carry no order: a map that says nothing matches nothing)."""
    x, y = _tensor(a), _tensor(b)
    if x.shape != y.shape or x.ndim < 2:
        raise ValueError(f"the maps must have one shape (N, H, W), got {tuple(x.shape)} and {tuple(y.shape)}")
    x, y = x.flatten(1), y.flatten(1)
    if absolute:
        x, y = x.abs(), y.abs()
    if not (torch.isfinite(x).all() and torch.isfinite(y).all()):
        raise ValueError("the maps must be finite")
    rx, ry = average_ranks(x), average_ranks(y)
    rx, ry = rx - rx.mean(1, keepdim=True), ry - ry.mean(1, keepdim=True)
    den = rx.norm(dim=1) * ry.norm(dim=1)
    return torch.where(den > 0, (rx * ry).sum(1) / den.clamp_min(1e-300), torch.zeros_like(den)).float()


def _gaussian(size: int = 11, sigma: float = 1.5) -> torch.Tensor:
    t = torch.arange(size, dtype=torch.float64) - size // 2
    g = torch.exp(-(t**2) / (2 * sigma**2))
    return g / g.sum()


def ssim(a: Any, b: Any, *, data_range: float = 1.0) -> torch.Tensor:
    """(N,) mean structural similarity (Wang et al. 2004: an 11 x 11 Gaussian window of sigma 1.5,
    ``K1 = 0.01``, ``K2 = 0.03``) of each pair of maps, over the window positions that fit inside the
    map (no padding); clips and volumes: each frame's, averaged. 1 for identical maps."""
    as_maps(a, "a"), as_maps(b, "b")  # finite, >= 0
    ta, tb = _tensor(a), _tensor(b)
    if ta.shape != tb.shape or ta.ndim not in (3, 4) or min(ta.shape[-2:]) < 11:
        raise ValueError(
            "ssim needs two maps of one shape (N, [T,] H, W), sides >= 11; "
            f"got {tuple(ta.shape)} and {tuple(tb.shape)}"
        )
    n = ta.shape[0]
    ta, tb = ta.reshape(-1, 1, *ta.shape[-2:]), tb.reshape(-1, 1, *tb.shape[-2:])
    g = _gaussian()
    win = (g[:, None] * g[None, :])[None, None]
    blur = lambda t: F.conv2d(t, win)  # noqa: E731 - valid positions only
    mu_a, mu_b = blur(ta), blur(tb)
    var_a = blur(ta * ta) - mu_a**2
    var_b = blur(tb * tb) - mu_b**2
    cov = blur(ta * tb) - mu_a * mu_b
    c1, c2 = (0.01 * data_range) ** 2, (0.03 * data_range) ** 2
    s = ((2 * mu_a * mu_b + c1) * (2 * cov + c2)) / ((mu_a**2 + mu_b**2 + c1) * (var_a + var_b + c2))
    return s.flatten(1).mean(1).view(n, -1).mean(1).float()
