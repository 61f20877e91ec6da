"""Does a map land on the object? Three measures against where the object is, given as boxes or
masks (a detector's boxes and a segmenter's masks work as they come):

- :func:`pointing_game` (Zhang et al. 2018, "Top-down neural attention by excitation backprop"):
  1 when the map's maximum lies inside the object, else 0;
- :func:`energy_in_mask` (Wang et al. 2020, Score-CAM's energy-based pointing game): the share of
  the map's total inside the object, in [0, 1];
- :func:`relevance_rank_accuracy` (Arras et al. 2022, "CLEVR-XAI"): of the ``k`` most relevant
  pixels, ``k`` the object's size, the share inside it.

Maps and masks are (N, H, W), or (N, T, H, W) for clips and volumes; masks are read as ``> 0.5``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from nstcam.metrics.complexity import as_maps

__all__ = ["box_masks", "energy_in_mask", "pointing_game", "relevance_rank_accuracy"]


def box_masks(boxes: Sequence[Any], size: tuple[int, int]) -> torch.Tensor:
    """(N, H, W) masks of one box per image, ``(x1, y1, x2, y2)`` in pixels of ``size`` = (H, W)
    (a detector's output), 1 inside (the box's pixels, its far edges excluded)."""
    h, w = size
    out = torch.zeros(len(boxes), h, w)
    for i, box in enumerate(boxes):
        x1, y1, x2, y2 = (float(v) for v in box)
        if not all(np.isfinite([x1, y1, x2, y2])) or x2 <= x1 or y2 <= y1:
            raise ValueError(f"boxes[{i}] must be finite (x1, y1, x2, y2) with x2 > x1 and y2 > y1")
        out[i, max(0, int(y1)) : max(0, int(np.ceil(y2))), max(0, int(x1)) : max(0, int(np.ceil(x2)))] = 1
    return out


def _tensor(value: Any) -> torch.Tensor:
    return torch.as_tensor(np.asarray(value) if not isinstance(value, torch.Tensor) else value).detach().cpu()


def _pair(maps: Any, masks: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """The maps (N, n) in float64 and the masks (N, n) as booleans, checked."""
    raw, k = _tensor(maps), _tensor(masks)
    m = as_maps(raw)
    if tuple(k.shape) != tuple(raw.shape):
        raise ValueError(f"masks must have the maps' shape {tuple(raw.shape)}, got {tuple(k.shape)}")
    inside = k.double().flatten(1) > 0.5
    if not inside.any(1).all():
        raise ValueError("every mask must hold at least one pixel (> 0.5)")
    return m, inside


def pointing_game(maps: Any, masks: Any) -> torch.Tensor:
    """(N,) 1.0 where the map's maximum (every pixel tied at it) lies inside the mask, else 0.0."""
    m, inside = _pair(maps, masks)
    top = m == m.max(1, keepdim=True).values
    return (top & inside).any(1).float()


def energy_in_mask(maps: Any, masks: Any) -> torch.Tensor:
    """(N,) the map's sum inside the mask over its sum everywhere (0 for an all-zero map)."""
    m, inside = _pair(maps, masks)
    total = m.sum(1)
    share = (m * inside).sum(1) / total.clamp_min(torch.finfo(torch.float64).tiny)
    return torch.where(total > 0, share, torch.zeros_like(share)).float()


def relevance_rank_accuracy(maps: Any, masks: Any) -> torch.Tensor:
    """(N,) of the mask's size ``k`` most relevant pixels (ties broken by position), the share inside."""
    m, inside = _pair(maps, masks)
    order = m.argsort(dim=1, descending=True, stable=True)
    k = inside.sum(1)
    ranked_inside = inside.gather(1, order)
    first_k = torch.arange(m.shape[1])[None] < k[:, None]
    return ((ranked_inside & first_k).sum(1) / k).float()
