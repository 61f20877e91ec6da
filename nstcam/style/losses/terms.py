"""Style-transfer losses, shared by the engine and the benchmark's judge.

Content and style losses are *relative*: each is divided by the squared norm of its target, so their
size does not depend on the activations' scale (BN-VGG's differ from plain VGG's) nor on image size,
and the same weights work everywhere.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch

from nstcam.style.losses import REGISTRY
from nstcam.style.losses.gram import reduce_images

__all__ = ["content_loss", "style_term", "total_variation"]

_EPS = 1e-8


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
    return reduce_images(per_image, reduction)


def total_variation(img: torch.Tensor, *, reduction: str = "sum") -> torch.Tensor:
    """Mean squared difference between neighbouring pixels of each of ``(N, 3, H, W)`` images."""
    dx = (img[..., :, 1:] - img[..., :, :-1]).pow(2).flatten(1).mean(1)
    dy = (img[..., 1:, :] - img[..., :-1, :]).pow(2).flatten(1).mean(1)
    return reduce_images(dx + dy, reduction)


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
    """Each image's style loss (N,) of ``kind``, a loss of :data:`nstcam.style.losses.REGISTRY`
    (the sliced loss on each layer's ``directions``, W2's square roots by ``sqrt``); ``mask_for(f)``,
    or each layer's ``masks[name]``, weighs positions."""

    def mask(n: str) -> torch.Tensor | None:
        if masks is not None:
            return masks[n]
        return None if mask_for is None else mask_for(feats[n])

    return REGISTRY[kind].term(feats, targets, weights, mask, directions, sqrt)
