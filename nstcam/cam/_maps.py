"""From activations and scores to maps: per-map normalisation, upsampling, and Score-CAM's weights."""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from nstcam.cam.methods import cam_from_weights

__all__ = ["normalize_maps", "scorecam", "upsample_maps"]


def normalize_maps(m: torch.Tensor) -> torch.Tensor:
    """Per-map min-max to [0, 1]; an all-constant map becomes zeros."""
    flat = m.flatten(1)
    lo, hi = flat.min(1, keepdim=True).values, flat.max(1, keepdim=True).values
    span = hi - lo
    out = torch.where(
        span > 0, (flat - lo) / torch.where(span > 0, span, torch.ones_like(span)), torch.zeros_like(flat)
    )
    return out.view_as(m)


def upsample_maps(raw: torch.Tensor, size: tuple[int, int]) -> torch.Tensor:
    """(N, h, w) raw maps to (N, H, W) maps in [0, 1] at ``size`` (bilinear, normalised before and after)."""
    up = F.interpolate(normalize_maps(raw).unsqueeze(1), size=size, mode="bilinear", align_corners=False)
    return normalize_maps(up.squeeze(1))


@torch.no_grad()
def scorecam(
    model: nn.Module,
    x: torch.Tensor,
    act: torch.Tensor,
    classes: torch.Tensor,
    chunk: int,
    on_chunk: Callable[[int], None] | None = None,
) -> torch.Tensor:
    """Wang et al. 2020: each channel, upsampled and min-max normalised, masks the input; its weight
    is the softmax score of the target class on the masked input. ``chunk`` masked images per forward
    pass bound the memory; ``on_chunk`` is told how many masked images each pass scored.
    Returns (N, h, w) maps before ReLU."""
    n, c = act.shape[:2]
    weights = torch.empty(n, c, device=act.device)
    for i in range(n):
        up = F.interpolate(act[i : i + 1].float(), size=x.shape[-2:], mode="bilinear", align_corners=False)[0]
        masks = normalize_maps(up)  # (C, H, W)
        for s in range(0, c, chunk):
            m = masks[s : s + chunk].unsqueeze(1)
            logits = model(x[i : i + 1] * m)
            weights[i, s : s + len(m)] = logits.float().softmax(1)[:, classes[i]]
            if on_chunk is not None:
                on_chunk(len(m))
    return cam_from_weights(act.float(), weights)
