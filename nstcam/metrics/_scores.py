"""What every metric shares: checking ``x``, ``maps`` and ``targets``, ranking pixels by a map, and
scoring many perturbed images in chunks."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from nstcam._checks import check_targets, whole
from nstcam.hooks import eval_view

__all__ = ["Inputs", "prepare", "rank_pixels", "score_items", "trapezoid"]


@dataclass
class Inputs:
    """Checked inputs of one metric call.

    Attributes:
        model: the model, in eval mode (a twin when the model has modules in training mode).
        x: (N, 3, H, W) batch.
        maps: (N, H, W) float maps on ``x``'s device.
        classes: (N,) target classes.
        scores: (N,) softmax score of each image's target on the unperturbed input.
        chunk: perturbed images per forward pass.
    """

    model: nn.Module
    x: torch.Tensor
    maps: torch.Tensor
    classes: torch.Tensor
    scores: torch.Tensor
    chunk: int

    @property
    def n(self) -> int:
        return self.x.shape[0]


def prepare(model: nn.Module, x: torch.Tensor, maps: Any, targets: Any, chunk: int) -> Inputs:
    """Checks the arguments and scores the unperturbed batch.

    Raises:
        ValueError: naming the argument: ``x`` not (N, 3, H, W); ``maps`` not (N, H, W) at ``x``'s
            size, not finite, or outside [0, 1]; ``targets`` not one class or one per image, or
            out of range; ``chunk`` not a positive whole number.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    clips = isinstance(x, torch.Tensor) and x.ndim == 5  # clips or volumes (N, C, T, H, W)
    if not isinstance(x, torch.Tensor) or not (clips or (x.ndim == 4 and x.shape[1] == 3)):
        shape = tuple(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__
        raise ValueError(
            f"x must be a normalised batch of shape (N, 3, H, W) (or clips (N, C, T, H, W)), got {shape}"
        )
    chunk = whole("chunk", chunk, minimum=1)
    m = torch.as_tensor(np.asarray(maps) if not isinstance(maps, torch.Tensor) else maps)
    if m.ndim == 2:
        m = m.unsqueeze(0)
    if m.shape != (x.shape[0], *x.shape[2:]):
        raise ValueError(
            f"maps must have shape (N, {'T, ' if clips else ''}H, W) = {(x.shape[0], *x.shape[2:])} to "
            f"match x, got {tuple(m.shape)}: resize the maps to the network input"
        )
    m = m.to(x.device, torch.float32)
    lo, hi = (float(v) for v in torch.aminmax(m))
    if not (np.isfinite(lo) and np.isfinite(hi)) or lo < -1e-6 or hi > 1 + 1e-6:
        raise ValueError(f"maps must lie in [0, 1] (normalise them first); got values from {lo:g} to {hi:g}")
    model = eval_view(model)
    x = x.detach()
    with torch.inference_mode(False), torch.no_grad():
        logits = model(x)
    if logits.ndim != 2:
        raise ValueError(f"the model must return logits of shape (N, classes), got {tuple(logits.shape)}")
    values = check_targets(targets, x.shape[0], logits.shape[1])
    classes = torch.tensor(values, dtype=torch.long, device=x.device)
    scores = logits.float().softmax(1).gather(1, classes[:, None])[:, 0]
    return Inputs(model, x, m.clamp(0, 1), classes, scores, chunk)


def rank_pixels(maps: torch.Tensor) -> torch.Tensor:
    """(N, H*W) rank of each pixel (a clip's: of each voxel, (N, T*H*W)), 0 for the most relevant
    (ties broken by position)."""
    order = maps.flatten(1).argsort(dim=1, descending=True, stable=True)
    ranks = torch.empty_like(order)
    ranks.scatter_(1, order, torch.arange(order.shape[1], device=order.device).expand_as(order))
    return ranks


def score_items(
    inputs: Inputs, per_image: int, build: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
) -> torch.Tensor:
    """(N, per_image) target scores of perturbed images: ``build(n, s)`` makes the images for the
    image indices ``n`` and perturbation indices ``s`` (1-D, equal length) of one chunk."""
    total = inputs.n * per_image
    out = torch.empty(total, device=inputs.x.device)
    with torch.inference_mode(False), torch.no_grad():
        for start in range(0, total, inputs.chunk):
            k = torch.arange(start, min(start + inputs.chunk, total), device=inputs.x.device)
            n, s = k // per_image, k % per_image
            logits = inputs.model(build(n, s))
            out[k] = logits.float().softmax(1).gather(1, inputs.classes[n][:, None])[:, 0]
    return out.view(inputs.n, per_image)


def trapezoid(curve: torch.Tensor) -> torch.Tensor:
    """Area under (N, S) curves sampled evenly on [0, 1]."""
    return torch.trapezoid(curve, dx=1.0 / (curve.shape[1] - 1), dim=1)
