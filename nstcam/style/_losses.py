"""Style-transfer losses, shared by the engine and the benchmark's judge.

Content and style losses are *relative*: each is divided by the squared norm of its target, so their
size does not depend on the activations' scale (BN-VGG's differ from plain VGG's) nor on image size,
and the same weights work everywhere.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

__all__ = ["content_loss", "gram", "style_loss", "total_variation"]

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


def content_loss(f: torch.Tensor, target: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """``||f - target||^2 / ||target||^2``, optionally weighted per position by ``mask``."""
    d = (f.float() - target.float()).pow(2)
    t = target.float().pow(2)
    if mask is not None:
        m = mask.float()
        return (d * m).sum() / (t * m).sum().clamp_min(_EPS)
    return d.sum() / t.sum().clamp_min(_EPS)


def style_loss(
    grams: Mapping[str, torch.Tensor], targets: Mapping[str, torch.Tensor], weights: Mapping[str, float]
) -> torch.Tensor:
    """Weighted mean over layers of ``||G - G_target||^2 / ||G_target||^2``."""
    total = sum(weights.values())
    loss = 0.0
    for name, w in weights.items():
        t = targets[name]
        loss = loss + w * (grams[name] - t).pow(2).sum() / t.pow(2).sum().clamp_min(_EPS)
    return loss / total


def total_variation(img: torch.Tensor) -> torch.Tensor:
    """Mean squared difference between neighbouring pixels of ``(N, 3, H, W)`` images."""
    dx = (img[..., :, 1:] - img[..., :, :-1]).pow(2).mean()
    dy = (img[..., 1:, :] - img[..., :-1, :]).pow(2).mean()
    return dx + dy
