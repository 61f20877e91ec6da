"""Style-transfer losses, shared by the engine and the benchmark's judge.

Content and style losses are *relative*: each is divided by the squared norm of its target, so their
size does not depend on the activations' scale (BN-VGG's differ from plain VGG's) nor on image size,
and the same weights work everywhere.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch

from nstcam.style._distribution import feature_stats, sliced_style_loss, w2_style_loss

__all__ = ["content_loss", "gram", "style_loss", "style_term", "total_variation"]

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


def _reduce(per_image: torch.Tensor, reduction: str) -> torch.Tensor:
    if reduction == "none":
        return per_image
    if reduction == "sum":
        return per_image.sum()
    raise ValueError(f"reduction must be 'sum' or 'none', got {reduction!r}")


def content_loss(
    f: torch.Tensor, target: torch.Tensor, mask: torch.Tensor | None = None, *, reduction: str = "sum"
) -> torch.Tensor:
    """``||f - target||^2 / ||target||^2`` of each image, optionally weighted per position by ``mask``.

    ``reduction="none"`` returns one value per image (N,); ``"sum"`` their sum. In a batch each
    image is measured against its own target, so a batch optimises each image as if it were alone.
    """
    d = (f.float() - target.float()).pow(2)
    t = target.float().pow(2).expand_as(d)
    if mask is not None:
        m = mask.float()
        d, t = d * m, t * m
    per_image = d.flatten(1).sum(1) / t.flatten(1).sum(1).clamp_min(_EPS)
    return _reduce(per_image, reduction)


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
    return _reduce(loss / total, reduction)


def total_variation(img: torch.Tensor, *, reduction: str = "sum") -> torch.Tensor:
    """Mean squared difference between neighbouring pixels of each of ``(N, 3, H, W)`` images."""
    dx = (img[..., :, 1:] - img[..., :, :-1]).pow(2).flatten(1).mean(1)
    dy = (img[..., 1:, :] - img[..., :-1, :]).pow(2).flatten(1).mean(1)
    return _reduce(dx + dy, reduction)


def style_term(
    feats: Mapping[str, torch.Tensor],
    targets: Mapping[str, Any],
    weights: Mapping[str, float],
    kind: str = "gram",
    mask_for: Callable[[torch.Tensor], torch.Tensor] | None = None,
    directions: Mapping[str, torch.Tensor] | None = None,
    sqrt: str = "eigh",
    masks: Mapping[str, torch.Tensor] | None = None,
) -> torch.Tensor:
    """Each image's style loss (N,) of ``kind``: ``"gram"`` (:func:`style_loss`), ``"wasserstein"``
    (:func:`nstcam.style._distribution.w2_style_loss`, its square roots by ``sqrt``) or ``"sliced"``
    (on each layer's ``directions``, :func:`~nstcam.style._distribution.sliced_style_loss`);
    ``mask_for(f)``, or each layer's ``masks[name]``, weighs positions."""

    def mask(n: str) -> torch.Tensor | None:
        if masks is not None:
            return masks[n]
        return None if mask_for is None else mask_for(feats[n])

    if kind == "gram":
        grams = {n: gram(feats[n], mask(n)) for n in weights}
        return style_loss(grams, targets, weights, reduction="none")
    if kind == "sliced":
        by_layer = None if mask_for is None and masks is None else {n: mask(n) for n in weights}
        return sliced_style_loss(feats, targets, weights, directions, by_layer)
    stats = {n: feature_stats(feats[n], mask(n)) for n in weights}
    return w2_style_loss(stats, targets, weights, sqrt)
