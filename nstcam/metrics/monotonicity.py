"""Monotonicity (Arya et al. 2019, "One explanation does not fit all", as Quantus' ``Monotonicity``):
starting from the baseline, the pixels are put back from the least to the most relevant in
``steps`` equal parts; a map whose order is right makes the target's score rise at every step.

Returns the share of steps at which the score did not fall, in [0, 1]; the paper's verdict,
monotonic or not, is that share being 1. Scores are softmax probabilities, the baseline as for
:func:`nstcam.metrics.insertion_auc`.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from nstcam._checks import whole
from nstcam.metrics._scores import prepare, rank_pixels, score_items
from nstcam.metrics.curves import Baseline, make_baseline

__all__ = ["monotonicity"]


def monotonicity(
    model: nn.Module,
    x: torch.Tensor,
    maps: Any,
    targets: Any,
    *,
    steps: int = 20,
    baseline: Baseline = "zeros",
    chunk: int = 32,
    tolerance: float = 0.0,
) -> torch.Tensor:
    """(N,) the share of the ``steps`` insertions (least relevant pixels first) after which the
    target's score is at least the one before, less ``tolerance``."""
    steps = whole("steps", steps, minimum=1)
    inputs = prepare(model, x, maps, targets, chunk)
    n_pix = inputs.maps[0].numel()
    ranks = n_pix - 1 - rank_pixels(inputs.maps)  # 0: the least relevant
    base = make_baseline(inputs.x, baseline)
    shape = inputs.x.shape[2:]

    def build(n: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
        back = ranks[n] < torch.round(s.float() * n_pix / steps)[:, None]
        return torch.where(back.view(-1, 1, *shape), inputs.x[n], base[n])

    scores = score_items(inputs, steps + 1, build).double()
    rises = scores[:, 1:] >= scores[:, :-1] - float(tolerance)
    return rises.double().mean(1).float()
