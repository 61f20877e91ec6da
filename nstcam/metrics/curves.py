"""Deletion and insertion (Petsiuk et al. 2018, RISE): remove (or insert) pixels in the map's order
in ``steps`` equal parts and take the area under the target's score curve, on [0, 1]."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from torchvision.transforms.functional import gaussian_blur

from nstcam._checks import whole
from nstcam.metrics._scores import Inputs, prepare, rank_pixels, score_items, trapezoid

__all__ = ["curve", "deletion_auc", "insertion_auc", "make_baseline"]

Baseline = str | float | torch.Tensor


def make_baseline(x: torch.Tensor, baseline: Baseline) -> torch.Tensor:
    """The image pixels are replaced with: ``"zeros"`` (zeros of the normalised input: the dataset's
    mean colour), ``"blur"`` (a Gaussian blur, kernel 11, sigma 5, as in RISE), a number, or a
    tensor broadcastable to ``x``."""
    if isinstance(baseline, torch.Tensor):
        try:
            return torch.broadcast_to(baseline.to(x.device, x.dtype), x.shape)
        except RuntimeError:
            raise ValueError(
                f"baseline of shape {tuple(baseline.shape)} does not broadcast to x {tuple(x.shape)}"
            ) from None
    if baseline == "zeros":
        return torch.zeros_like(x)
    if baseline == "blur":  # a clip's (N, C, T, H, W): each frame blurred in space
        flat = x.reshape(-1, *x.shape[-3:]) if x.ndim == 5 else x
        return gaussian_blur(flat, kernel_size=[11, 11], sigma=[5.0, 5.0]).reshape(x.shape)
    if isinstance(baseline, (int, float)) and not isinstance(baseline, bool):
        return torch.full_like(x, float(baseline))
    raise ValueError(f"baseline must be 'zeros', 'blur', a number or a tensor; got {baseline!r}")


def curve(inputs: Inputs, steps: int, baseline: torch.Tensor, insert: bool) -> torch.Tensor:
    """(N, steps + 1) target scores with 0, 1/steps, ..., all pixels removed (or inserted)."""
    hw = inputs.maps[0].numel()
    ranks = rank_pixels(inputs.maps)
    shape = inputs.x.shape[2:]  # (H, W), or a clip's (T, H, W): deleted and inserted in space-time

    def build(n: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
        changed = ranks[n] < torch.round(s.float() * hw / steps)[:, None]  # the first s/steps of the order
        changed = changed.view(-1, 1, *shape)
        if insert:
            return torch.where(changed, inputs.x[n], baseline[n])
        return torch.where(changed, baseline[n], inputs.x[n])

    return score_items(inputs, steps + 1, build)


def _auc(model, x, maps, targets, steps, baseline, chunk, return_curve, insert):
    steps = whole("steps", steps, minimum=1)
    inputs = prepare(model, x, maps, targets, chunk)
    scores = curve(inputs, steps, make_baseline(inputs.x, baseline), insert)
    auc = trapezoid(scores)
    return (auc, scores) if return_curve else auc


def deletion_auc(
    model: nn.Module,
    x: torch.Tensor,
    maps: Any,
    targets: Any,
    *,
    steps: int = 20,
    baseline: Baseline = "zeros",
    chunk: int = 32,
    return_curve: bool = False,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """(N,) area under the score curve as the most relevant pixels are removed first; lower is
    better (a faithful map makes the score fall fast).

    Args:
        model: a classifier returning logits.
        x: normalised batch (N, 3, H, W).
        maps: (N, H, W) in [0, 1].
        targets: one class for all images, or one per image.
        steps: the curve has ``steps + 1`` points, from nothing to everything removed.
        baseline: what removed pixels become (see :func:`make_baseline`); default the mean colour.
        chunk: perturbed images per forward pass (bounds memory).
        return_curve: also return the (N, steps + 1) curve.
    """
    return _auc(model, x, maps, targets, steps, baseline, chunk, return_curve, insert=False)


def insertion_auc(
    model: nn.Module,
    x: torch.Tensor,
    maps: Any,
    targets: Any,
    *,
    steps: int = 20,
    baseline: Baseline = "blur",
    chunk: int = 32,
    return_curve: bool = False,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """(N,) area under the score curve as the most relevant pixels are put back first into the
    baseline (default a blurred copy); higher is better. Arguments as in :func:`deletion_auc`."""
    return _auc(model, x, maps, targets, steps, baseline, chunk, return_curve, insert=True)
