"""Confidence change: the target's score on ``x * map`` minus its score on ``x``, and from it
Average Drop and Increase in Confidence (Chattopadhyay et al. 2018)."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from nstcam.metrics._scores import Inputs, prepare, score_items

__all__ = ["average_drop_increase", "confidence_change", "masked_scores"]


def masked_scores(inputs: Inputs) -> torch.Tensor:
    """(N,) target scores of the images multiplied by their maps."""
    return score_items(inputs, 1, lambda n, s: inputs.x[n] * inputs.maps[n].unsqueeze(1))[:, 0]


def confidence_change(
    model: nn.Module, x: torch.Tensor, maps: Any, targets: Any, *, chunk: int = 32
) -> torch.Tensor:
    """(N,) softmax score of the target on ``x * map`` minus on ``x``; higher is better (the same
    quantity as pytorch-grad-cam's ``CamMultImageConfidenceChange`` with softmax targets).

    Args:
        model: a classifier returning logits.
        x: normalised batch (N, 3, H, W).
        maps: (N, H, W) in [0, 1].
        targets: one class for all images, or one per image.
        chunk: images per forward pass.
    """
    inputs = prepare(model, x, maps, targets, chunk)
    return masked_scores(inputs) - inputs.scores


def average_drop_increase(
    model: nn.Module, x: torch.Tensor, maps: Any, targets: Any, *, chunk: int = 32
) -> tuple[float, float]:
    """Average Drop (%, lower is better): the mean of ``max(0, Y - O) / Y``; Increase in
    Confidence (%, higher is better): the share of images where ``O > Y``; ``Y`` the target's
    score on ``x``, ``O`` on ``x * map``. Arguments as in :func:`confidence_change`."""
    inputs = prepare(model, x, maps, targets, chunk)
    return drop_increase(inputs.scores, masked_scores(inputs))


def drop_increase(before: torch.Tensor, after: torch.Tensor) -> tuple[float, float]:
    """Average Drop and Increase in Confidence (both %) from the scores before and after."""
    drop = (before - after).clamp_min(0) / before.clamp_min(1e-12)
    return float(drop.mean() * 100), float((after > before).float().mean() * 100)
