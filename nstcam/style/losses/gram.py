"""The Gram loss (Gatys et al. 2016): each layer's Gram matrix against the style's, relative to the
style's squared norm."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from nstcam.style.losses.base import Feats, MaskFn, StyleLoss, Weights

__all__ = ["LOSS", "gram", "reduce_images", "style_loss"]

_EPS = 1e-8


def gram(f: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """Gram matrices ``(N, C, C)`` of features ``(N, C, H, W)``, averaged over positions (float32).

    Args:
        f: features.
        mask: optional ``(N, 1, H, W)`` weights; positions are weighted and the mean is taken over
            the mask's total weight.
    """
    n, c, h, w = f.shape
    f = f.float().reshape(n, c, h * w)
    if mask is None:
        return torch.bmm(f, f.transpose(1, 2)) / (h * w)
    m = mask.float().reshape(n, 1, h * w)
    return torch.bmm(f * m, f.transpose(1, 2)) / m.sum(-1, keepdim=True).clamp_min(_EPS)


def reduce_images(per_image: torch.Tensor, reduction: str) -> torch.Tensor:
    if reduction == "none":
        return per_image
    if reduction == "sum":
        return per_image.sum()
    raise ValueError(f"reduction must be 'sum' or 'none', got {reduction!r}")


def style_loss(
    grams: Mapping[str, torch.Tensor],
    targets: Mapping[str, torch.Tensor],
    weights: Mapping[str, float],
    *,
    reduction: str = "sum",
) -> torch.Tensor:
    """Weighted mean over layers of ``||G - G_target||^2 / ||G_target||^2`` for each image
    (targets ``(1, C, C)`` are shared by the batch, ``(N, C, C)`` are one per image)."""
    total = sum(weights.values())
    loss = 0.0
    for name, w in weights.items():
        g, t = grams[name], targets[name].expand_as(grams[name])
        loss = loss + w * (g - t).pow(2).flatten(1).sum(1) / t.pow(2).flatten(1).sum(1).clamp_min(_EPS)
    return reduce_images(loss / total, reduction)


def gram_term(
    feats: Feats, targets: Feats, weights: Weights, mask: MaskFn, directions: Any = None, sqrt: str = "eigh"
) -> torch.Tensor:
    """Each image's Gram loss (N,), positions weighed by ``mask(name)``."""
    grams = {n: gram(feats[n], mask(n)) for n in weights}
    return style_loss(grams, targets, weights, reduction="none")


LOSS = StyleLoss(
    "gram",
    "Gatys: each layer's Gram matrix (default)",
    "grams",
    lambda g, seed: g,
    gram_term,
    layer_balance=True,  # the balance is measured in Gram terms
)
