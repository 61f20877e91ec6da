"""Targets of one scale: content features, style Gram matrices (cached per call or batch) and the
style mask resized to each layer."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch
from PIL import Image

from nstcam.image import image_to_tensor, resize_long_side
from nstcam.mask import resize_mask
from nstcam.style._color import luminance_only, match_luminance
from nstcam.style._losses import gram
from nstcam.style._plan import Plan
from nstcam.style._runtime import Runtime
from nstcam.style.hooks import VGGFeatureHooks

__all__ = ["ScaleInputs", "Targets", "scale_inputs", "style_targets"]


@dataclass
class Targets:
    """What the losses at one scale compare against."""

    content: dict[str, torch.Tensor]
    style: dict[str, torch.Tensor]
    mask: torch.Tensor | None = None  # (1, 1, h, w) style mask at this scale, in-optimisation mode only
    pixels: torch.Tensor | None = None  # the content image at this scale (for the masked pixel anchor)
    layer_masks: dict = field(default_factory=dict)  # feature shape -> mask resized to it

    def mask_for(self, f: torch.Tensor) -> torch.Tensor:
        key = tuple(f.shape[-2:])
        if key not in self.layer_masks:
            self.layer_masks[key] = resize_mask(self.mask, key, device=f.device)
        return self.layer_masks[key]


@dataclass
class ScaleInputs:
    """The content at one scale and the targets computed from it.

    Attributes:
        full: the content in colour.
        seen: what the network sees (luminance only when colours are preserved).
        targets: the loss targets.
    """

    full: torch.Tensor
    seen: torch.Tensor
    targets: Targets


def style_targets(
    rt: Runtime,
    hooks: VGGFeatureHooks,
    styles: list[Image.Image],
    plan: Plan,
    long_side: int,
    content_t: torch.Tensor,
    cache: dict,
) -> dict[str, torch.Tensor]:
    """Blended Gram matrices of the style images at ``long_side * style_scale``; ``cache`` (one per
    call, or per batch) keeps them for the next image or scale that needs the same."""
    s_side = max(16, round(long_side * plan.style_scale))
    key = (s_side, tuple(plan.blend), tuple(plan.style_layers), plan.preserve_color)
    if plan.preserve_color:  # grey style matched to this content's luminance statistics
        key += (round(float(content_t.mean()), 4), round(float(content_t.std()), 4))
    if key in cache:
        return cache[key]
    targets: dict[str, torch.Tensor] = {}
    with torch.no_grad():
        for img, w in zip(styles, plan.blend, strict=True):
            if w == 0:
                continue
            s = image_to_tensor(resize_long_side(img, s_side), rt.device)
            if plan.preserve_color:
                s = match_luminance(s, content_t)
            feats = rt.features(hooks, s)
            rt.style_targets.add()
            for name in plan.style_layers:
                g = gram(feats[name]) * w
                targets[name] = targets[name] + g if name in targets else g
    cache[key] = targets
    return targets


def scale_inputs(
    rt: Runtime,
    hooks: VGGFeatureHooks,
    content: Image.Image,
    styles: list[Image.Image],
    plan: Plan,
    side: int,
    cache: dict,
    mask: np.ndarray | None,
) -> ScaleInputs:
    """The content at long side ``side`` and every target the losses need there."""
    full = image_to_tensor(resize_long_side(content, side), rt.device)
    seen = luminance_only(full) if plan.preserve_color else full
    in_loss = mask is not None and plan.extra["mask_mode"] == "optimize"
    with torch.no_grad():
        feats = rt.features(hooks, seen)
        targets = Targets(
            content={n: feats[n].detach().float() for n in plan.content_layers},
            style=style_targets(rt, hooks, styles, plan, side, seen, cache),
            mask=resize_mask(mask, tuple(seen.shape[-2:]), rt.device) if in_loss else None,
            pixels=seen if in_loss else None,
        )
    return ScaleInputs(full, seen, targets)
