"""Shared steps from a layer's activation to maps: the hooked forward pass, reading the activation
as (N, C, h, w), per-map normalisation and upsampling."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from nstcam.cam.hooks import CamHooks
from nstcam.layouts import detect_layout, to_nchw

__all__ = ["hooked_pass", "minmax", "model_output", "normalize_maps", "read_nchw", "upsample_maps"]


def normalize_maps(m: torch.Tensor) -> torch.Tensor:
    """Per-map min-max to [0, 1]; an all-constant map becomes zeros."""
    flat = m.flatten(1)
    lo, hi = flat.min(1, keepdim=True).values, flat.max(1, keepdim=True).values
    span = hi - lo
    out = torch.where(
        span > 0, (flat - lo) / torch.where(span > 0, span, torch.ones_like(span)), torch.zeros_like(flat)
    )
    return out.view_as(m)


def minmax(t: torch.Tensor, dims: tuple[int, ...], eps: float) -> torch.Tensor:
    """``(t - min) / (max - min + eps)`` over ``dims``: the libraries' per-map scaling with their own
    eps (torch-cam 1e-8, pytorch-grad-cam 1e-7), kept where a map must match theirs."""
    t = t - t.amin(dim=dims, keepdim=True)
    return t / (t.amax(dim=dims, keepdim=True) + eps)


def upsample_maps(raw: torch.Tensor, size: tuple[int, int]) -> torch.Tensor:
    """(N, h, w) raw maps to (N, H, W) maps in [0, 1] at ``size`` (bilinear, normalised before and after)."""
    up = F.interpolate(normalize_maps(raw).unsqueeze(1), size=size, mode="bilinear", align_corners=False)
    return normalize_maps(up.squeeze(1))


def hooked_pass(
    model: nn.Module, layer: str, x: torch.Tensor, classes: Callable[[torch.Tensor], torch.Tensor]
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """One forward pass with ``layer`` recorded: (logits, the layer's activation in its own layout,
    the (k, N) ``classes(logits)``, probabilities), all detached (grad mode is on past the layer)."""
    with torch.inference_mode(False), torch.no_grad(), CamHooks(model, layer) as hooks:
        logits = model(x)
        act = hooks.checked_activation(logits).detach()
        targets = classes(logits)
    return logits.detach(), act, targets, logits.detach().float().softmax(1)


def read_nchw(act: torch.Tensor, layout: str | None, x: torch.Tensor) -> torch.Tensor:
    """``act`` as (N, C, h, w) for the input ``x``, in ``layout`` (None: read from the shape)."""
    in_h, in_w = x.shape[-2:]
    return to_nchw(act, layout or detect_layout(tuple(act.shape), in_h, in_w), in_h, in_w)


def model_output(out: Any) -> Any:
    """What targets read: a segmenter's ``"out"`` tensor, else the output as the model gives it."""
    if isinstance(out, dict) and "out" in out:
        return out["out"]
    return out
