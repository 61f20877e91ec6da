"""Sliced Wasserstein-2 (Heitz et al., CVPR 2021): features projected on unit directions, each
projection's values sorted and compared with the style's at the same quantiles (sizes may differ:
the style's sorted values are interpolated, never repeated).

``tests/benchmarks/bench_style_losses.py`` times it against the Gram loss.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch

from nstcam.style._selfcheck import Tolerance
from nstcam.style.losses.base import Feats, MaskFn, StyleLoss, Weights, wide
from nstcam.style.vgg import layer_channels, layer_stride

__all__ = [
    "LOSS",
    "MAX_SAMPLES",
    "directions_for",
    "random_directions",
    "sliced_bytes",
    "sliced_style_loss",
    "sliced_target",
    "sliced_w2",
    "sorted_projections",
]


def random_directions(
    c: int, k: int, generator: torch.Generator, device: torch.device | str = "cpu"
) -> torch.Tensor:
    """(C, K) unit directions, uniform on the sphere, from ``generator`` (a run's seed and step)."""
    d = torch.randn(c, k, generator=generator).to(device)
    return d / d.norm(dim=0, keepdim=True)


def sorted_projections(f: torch.Tensor, directions: torch.Tensor) -> torch.Tensor:
    """Features (N, C, H, W) projected on ``directions`` (C, K), sorted over positions: (N, K, H*W)."""
    n, c = f.shape[:2]
    return (directions.T.to(f.dtype) @ f.reshape(n, c, -1)).sort(dim=-1).values


def sliced_w2(f: torch.Tensor, target_sorted: torch.Tensor, directions: torch.Tensor) -> torch.Tensor:
    """Sliced squared Wasserstein-2 distance of features (N, C, H, W) to a target's sorted
    projections (1 or N, K, M_t) on the same ``directions`` (C, K): the mean over directions and
    quantiles of the squared difference of sorted values, (N,)."""
    mine = sorted_projections(wide(f), wide(directions))
    theirs = wide(target_sorted)
    if theirs.shape[-1] != mine.shape[-1]:  # read at the output's levels (i + 0.5) / m
        m, mt = mine.shape[-1], theirs.shape[-1]
        levels = ((torch.arange(m, device=mine.device, dtype=mine.dtype) + 0.5) / m).expand(
            *mine.shape[:2], m
        )
        theirs = _weighted_quantiles(
            theirs, torch.full(theirs.shape[::2], 1 / mt, dtype=theirs.dtype, device=theirs.device), levels
        )
    return (mine - theirs).pow(2).mean(dim=(1, 2))


MAX_SAMPLES = 16384
"""Positions of a style's layer kept for the sliced loss (drawn once, seeded): its quantile
functions are read from them, and each step projects and sorts them."""


def directions_for(c: int, seed: int, draw: int, device: torch.device | str) -> torch.Tensor:
    """The sliced loss' (C, K) directions of evaluation ``draw`` of a run seeded ``seed``: fresh at
    each evaluation, the same in every rerun; K = max(8, C // 4) (the measured cost, README)."""
    gen = torch.Generator().manual_seed((seed * 1_000_003 + draw * 7919 + c) % (2**63 - 1))
    return random_directions(c, max(8, c // 4), gen, device)


def sliced_target(parts: list[tuple[torch.Tensor, float]], seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(positions (1, C, M), their weights (1, M), summing to 1) of a blend of styles' features
    ``(f (1, C, H, W), blend weight)``: each style's positions (at most :data:`MAX_SAMPLES`, drawn
    from ``seed``) weighted by its blend weight, so the target is the mixture's distribution."""
    feats, weights = [], []
    gen = torch.Generator().manual_seed(seed)
    for f, w in parts:
        x = wide(f)[0].flatten(1)
        if x.shape[1] > MAX_SAMPLES:
            x = x[:, torch.randperm(x.shape[1], generator=gen)[:MAX_SAMPLES].to(x.device)]
        feats.append(x)
        weights.append(torch.full((x.shape[1],), w / x.shape[1], device=x.device))
    w = torch.cat(weights)
    return torch.cat(feats, dim=1)[None], (w / w.sum())[None]


def _search(mid: torch.Tensor, levels: torch.Tensor) -> torch.Tensor:
    """``searchsorted`` of ``levels`` (N, K, Q) in each row of ``mid`` (B, K, M), B being N or 1,
    without expanding ``mid`` to N: inductor (torch 2.11, CUDA) cannot lower a search in an
    expanded view (``NotImplementedError: ExpandView``), so one target's rows take every image's
    levels side by side instead."""
    n, k, q = levels.shape
    if mid.shape[0] == n:
        return torch.searchsorted(mid.contiguous(), levels.contiguous())
    side_by_side = levels.transpose(0, 1).reshape(1, k, n * q)
    return torch.searchsorted(mid.contiguous(), side_by_side).reshape(k, n, q).transpose(0, 1)


def _weighted_quantiles(values: torch.Tensor, weights: torch.Tensor, levels: torch.Tensor) -> torch.Tensor:
    """The quantile function of ``values`` (B, K, M) with position ``weights`` (B, M), read at
    ``levels`` (N, K, Q) in (0, 1) by linear interpolation between the weights' midpoints."""
    v, order = values.sort(dim=-1)
    w = weights[:, None, :].expand_as(values).gather(-1, order)
    mid = w.cumsum(-1) - w / 2  # (B, K, M): each sorted value's level
    hi = _search(mid, levels).clamp(1, v.shape[-1] - 1)
    mid, v = mid.expand(levels.shape[0], -1, -1), v.expand(levels.shape[0], -1, -1)
    lo = hi - 1
    m_lo, m_hi = mid.gather(-1, lo), mid.gather(-1, hi)
    t = ((levels - m_lo) / (m_hi - m_lo).clamp_min(1e-12)).clamp(0, 1)
    return v.gather(-1, lo) * (1 - t) + v.gather(-1, hi) * t


def sliced_style_loss(
    feats: dict[str, torch.Tensor],
    targets: dict[str, tuple[torch.Tensor, torch.Tensor]],
    weights: dict[str, float],
    directions: dict[str, torch.Tensor],
    masks: dict[str, torch.Tensor | None] | None = None,
) -> torch.Tensor:
    """Weighted mean over layers of each image's sliced squared W2 distance (N,) to the style's
    positions, on each layer's ``directions`` (C, K), divided by the style's mean squared
    projection (relative, as the Gram loss is). ``masks[name]`` (N, 1, h, w) weighs the output's
    positions: each sorted value sits at its cumulative weight's level."""
    total = sum(weights.values())
    loss = 0.0
    for name, wl in weights.items():
        f, d = wide(feats[name]), directions[name]
        values, pos_w = targets[name]
        n, c = f.shape[:2]
        mine = d.T.to(f.dtype) @ f.reshape(n, c, -1)  # (N, K, HW)
        theirs = d.T.to(values.dtype) @ values  # (B, K, M)
        mask = None if masks is None else masks.get(name)
        if mask is None:
            m = mine.sort(dim=-1).values
            q = m.shape[-1]
            levels = ((torch.arange(q, device=f.device, dtype=f.dtype) + 0.5) / q).expand(n, m.shape[1], q)
            per = (m - _weighted_quantiles(theirs, pos_w, levels)).pow(2).mean(dim=(1, 2))
        else:
            mw = mask.to(f.dtype).reshape(n, 1, -1).expand_as(mine)
            m, order = mine.sort(dim=-1)
            ws = mw.gather(-1, order)
            tot = ws.sum(-1, keepdim=True).clamp_min(1e-12)
            levels = (ws.cumsum(-1) - ws / 2) / tot
            per = ((m - _weighted_quantiles(theirs, pos_w, levels)).pow(2) * ws / tot).sum(-1).mean(-1)
        scale = (theirs.pow(2) * pos_w[:, None, :]).sum(-1).mean(-1).clamp_min(1e-8)  # (B,)
        loss = loss + wl * per / scale
    return loss / total


def sliced_bytes(
    width: int, height: int, style_layers: Iterable[str], style_scale: float = 1.0, tile: int | None = None
) -> int:
    """What the sliced loss keeps and sorts beyond the model: each style layer's kept positions (at
    most :data:`MAX_SAMPLES`) and, per step, their projections and the
    output's (of one window when tiled), sorted (x 3, float32)."""
    total = 0
    style_pixels = width * height * style_scale**2
    out_pixels = width * height if tile is None else min(width, tile) * min(height, tile)
    for name in style_layers:
        c, stride = layer_channels(name), layer_stride(name)
        kept = min(MAX_SAMPLES, int(style_pixels / stride**2)) * c
        projected = (out_pixels // stride**2 + kept // c) * max(8, c // 4)
        total += (kept + projected) * 4
    return 3 * total


def sliced_term(
    feats: Feats, targets: Feats, weights: Weights, mask: MaskFn, directions: Any = None, sqrt: str = "eigh"
) -> torch.Tensor:
    """Each image's sliced loss (N,) on each layer's ``directions``, positions weighed by ``mask``."""
    masks = {n: mask(n) for n in weights}
    by_layer = None if all(v is None for v in masks.values()) else masks
    return sliced_style_loss(feats, targets, weights, directions, by_layer)


LOSS = StyleLoss(
    "sliced",
    "each layer's whole feature distribution, compared along random directions",
    "positions",
    sliced_target,
    sliced_term,
    random_directions=True,
    extra_bytes=sliced_bytes,
    # Sorting: values that nearly tie swap places between two float32 evaluations, and their
    # gradients with them: the compiled step against eager, image gradients differ by up to 4.4e-3
    # relative L2 (cosine >= 0.99999; 32-96 px, tests/benchmarks/bench_selfcheck.py); the terms by
    # 1.3e-6, held to the usual 1e-4.
    check=Tolerance(terms=1e-4, grad=5e-2, cosine=0.9999),
)
