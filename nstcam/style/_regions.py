"""A style per region: ``stylize(content, [a, b], style_masks=[mask_a, mask_b])``.

Each style has its own targets (not blended) and its own mask; its loss reads only its region's
features (the masked Gram, Gaussian or distribution of :func:`~nstcam.style.losses.terms.style_term`),
so each region matches its own style as a ``style_mask`` run of that style alone would. One mask may
be None: that style takes what the others leave (``1 - their sum``). Where no mask reaches, the
content is kept, as a ``style_mask`` keeps it where the mask is 0.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np
import torch

from nstcam.mask import MaskSource, load_mask, resize_mask
from nstcam.style._plan import Plan

SELECT_BELOW = 0.75
"""A region reaching fewer than this share of a layer's positions has its loss read on those alone."""

__all__ = ["Region", "load_regions", "region_masks", "region_plan", "region_weights"]


@dataclasses.dataclass
class Region:
    """One style's targets, its mask at this scale ``(N, 1, h, w)``, and the weight of its loss."""

    style: dict
    mask: torch.Tensor
    weight: float = 1.0
    resized: dict = dataclasses.field(default_factory=dict)  # feature size -> the mask at it
    reached: dict = dataclasses.field(default_factory=dict)  # feature size -> positions reached, or None

    def select(self, f: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The positions of features ``f`` (N, C, h, w) this region reaches (mask > 0), as
        ``(N, C, 1, K)``, and their mask weights ``(N, 1, 1, K)``: a region's loss then costs its
        share of the image, not all of it (all positions where it reaches most of them)."""
        m = self.mask_for(f)
        key = tuple(f.shape[-2:])
        if key not in self.reached:
            reach = m[0].flatten() > 0
            self.reached[key] = (
                None if reach.float().mean() > SELECT_BELOW else torch.nonzero(reach).flatten()
            )
        idx = self.reached[key]
        if idx is None:
            return f, m
        n, c = f.shape[:2]
        picked = f.reshape(n, c, -1).index_select(2, idx)  # backward: index_add, not index_put
        return picked[:, :, None], m.reshape(m.shape[0], 1, -1).index_select(2, idx)[:, :, None]

    def mask_for(self, f: torch.Tensor) -> torch.Tensor:
        """The mask at the size of features ``f`` (area when shrinking), cached."""
        key = tuple(f.shape[-2:])
        if key not in self.resized:
            self.resized[key] = resize_mask(self.mask, key)
        return self.resized[key]


def load_regions(style_masks: Sequence[MaskSource | None], n_styles: int) -> list[np.ndarray | None]:
    """The masks of ``style_masks``, one per style, each loaded as ``style_mask`` is.

    Raises:
        ValueError: not one mask per style, more than one None, or a mask that is not a mask (the
            message names ``style_masks[i]``).
    """
    if isinstance(style_masks, (str, bytes, np.ndarray, torch.Tensor)) or not hasattr(style_masks, "__len__"):
        raise ValueError("style_masks must be a list with one mask (or None) per style image")
    masks = list(style_masks)
    if len(masks) != n_styles:
        raise ValueError(
            f"style_masks has {len(masks)} masks for {n_styles} style images; give one per style"
        )
    if sum(m is None for m in masks) > 1:
        raise ValueError("style_masks may hold one None (the style of the rest), not more")
    return [None if m is None else load_mask(m, f"style_masks[{i}]") for i, m in enumerate(masks)]


def region_masks(
    regions: Sequence[np.ndarray | None], size: tuple[int, int], n: int, device: torch.device
) -> tuple[list[torch.Tensor], torch.Tensor]:
    """Each style's mask at ``size`` = (H, W) for a batch of ``n`` (None: what the others leave),
    and their union, clamped to [0, 1] (where the style goes; the rest keeps the content)."""
    given = [None if m is None else resize_mask(m, size, device) for m in regions]
    covered = sum(m for m in given if m is not None).clamp(0, 1)
    masks = [(1 - covered) if m is None else m for m in given]
    union = sum(masks).clamp(0, 1)
    return [m.expand(n, -1, -1, -1) for m in masks], union.expand(n, -1, -1, -1)


def region_plan(plan: Plan, i: int) -> Plan:
    """``plan`` with the blend of style ``i`` alone, so its targets are that style's (and cached
    under their own key)."""
    blend = [1.0 if j == i else 0.0 for j in range(len(plan.blend))]
    return dataclasses.replace(plan, blend=blend)


def region_weights(plan: Plan) -> list[float]:
    """Each region's loss weight: ``style_weights`` scaled to a mean of 1 (1 each by default)."""
    return [w * len(plan.blend) for w in plan.blend]
