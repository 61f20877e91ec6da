"""How complex is a map? Sparseness (Chalasani et al. 2020: the Gini index of the map's values) and
complexity (Bhatt et al. 2020: the entropy of the map read as a distribution over pixels).

Both read only the maps, ``(N, ...)`` with any number of trailing dimensions (images (N, H, W),
clips and volumes (N, T, H, W)), values >= 0; both are computed in float64.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

__all__ = ["as_maps", "complexity", "sparseness"]


def as_maps(maps: Any, name: str = "maps") -> torch.Tensor:
    """``maps`` as a float64 tensor (N, ...) checked: finite, >= 0, at least one value per map."""
    m = torch.as_tensor(np.asarray(maps) if not isinstance(maps, torch.Tensor) else maps)
    if m.ndim < 2 or m[0].numel() == 0:
        raise ValueError(f"{name} must have shape (N, H, W) or (N, T, H, W), got {tuple(m.shape)}")
    m = m.detach().to("cpu", torch.float64)
    if not torch.isfinite(m).all() or (m < 0).any():
        raise ValueError(f"{name} must be finite and >= 0 (a saliency map, e.g. in [0, 1])")
    return m.flatten(1)


def sparseness(maps: Any) -> torch.Tensor:
    """(N,) Gini index of each map's values, in [0, 1): 0 for a constant map (all pixels alike), near
    1 for a map that puts everything on one pixel ((n - 1) / n exactly). Chalasani et al. 2020,
    "Concise explanations of neural networks using adversarial training" (Quantus' ``Sparseness``):
    ``G = sum_i (2i - n - 1) v_(i) / (n sum_i v_(i))`` over the sorted values ``v_(1) <= ... <= v_(n)``.
    An all-zero map counts as constant (0)."""
    v = as_maps(maps).sort(dim=1).values
    n = v.shape[1]
    i = torch.arange(1, n + 1, dtype=torch.float64)
    total = v.sum(1)
    gini = ((2 * i - n - 1) * v).sum(1) / (n * total.clamp_min(torch.finfo(torch.float64).tiny))
    return torch.where(total > 0, gini, torch.zeros_like(gini)).float()


def complexity(maps: Any) -> torch.Tensor:
    """(N,) entropy (in nats) of each map normalised to sum to 1: ``-sum p log p``, from 0 (one pixel)
    to ``log(n)`` (a constant map). Bhatt et al. 2020, "Evaluating and aggregating feature-based model
    explanations" (Quantus' ``Complexity``). An all-zero map counts as constant (``log(n)``)."""
    m = as_maps(maps)
    total = m.sum(1, keepdim=True)
    p = torch.where(total > 0, m / total.clamp_min(torch.finfo(torch.float64).tiny), 1.0 / m.shape[1])
    return -(torch.special.xlogy(p, p)).sum(1).float()
