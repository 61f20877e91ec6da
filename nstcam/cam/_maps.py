"""Shared steps from a layer's activation to maps: the hooked forward pass, reading the activation
as channels first (N, C, *grid), per-map normalisation and upsampling (bilinear over an image's
(h, w), trilinear over a clip's or a volume's (t, h, w))."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from nstcam.cam.hooks import CamHooks
from nstcam.layouts import detect_layout, input_grid, to_nchw

__all__ = [
    "hooked_pass",
    "minmax",
    "model_output",
    "normalize_maps",
    "read_nchw",
    "resize_grid",
    "upsample_maps",
]


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


def resize_grid(t: torch.Tensor, size: tuple[int, ...]) -> torch.Tensor:
    """(N, C, *grid) resized to (N, C, *size): bilinear over (h, w), trilinear over (t, h, w)."""
    size = tuple(int(s) for s in size)
    if tuple(t.shape[2:]) == size:
        return t
    mode = {2: "bilinear", 3: "trilinear"}.get(len(size))
    if mode is None or t.ndim != len(size) + 2:
        raise ValueError(f"cannot resize a grid of shape {tuple(t.shape)} to {size}")
    return F.interpolate(t, size=size, mode=mode, align_corners=False)


def upsample_maps(raw: torch.Tensor, size: tuple[int, ...]) -> torch.Tensor:
    """(N, *grid) raw maps to (N, *size) maps in [0, 1] (bilinear over (h, w), trilinear over a
    clip's (t, h, w); normalised before and after)."""
    return normalize_maps(resize_grid(normalize_maps(raw).unsqueeze(1), size).squeeze(1))


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
    """``act`` as (N, C, *grid) for the input ``x``, in ``layout`` (None: read from the shape)."""
    grid = input_grid(x)
    return to_nchw(act, layout or detect_layout(tuple(act.shape), *grid), *grid)


def model_output(out: Any) -> Any:
    """What targets read: a segmenter's ``"out"`` tensor, else the output as the model gives it."""
    if isinstance(out, dict) and "out" in out:
        return out["out"]
    return out
