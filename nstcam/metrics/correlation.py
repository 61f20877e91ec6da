"""Faithfulness correlation (Bhatt et al. 2020, "Evaluating and aggregating feature-based model
explanations"): over ``samples`` random subsets of ``subset`` pixels, the Pearson correlation between
the map's sum over the subset and the fall of the target's score when the subset is removed. A
faithful map says, for any set of pixels, how much removing them costs: 1 is perfect, 0 is chance.

Scores are the target's softmax probability, as every faithfulness metric here reads them; removed
pixels take the baseline (:func:`nstcam.metrics.curves.make_baseline`, default the model's "zero").
Subsets are drawn from a generator seeded with ``seed``: reproducible, global state untouched.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from nstcam._checks import whole
from nstcam.metrics._scores import prepare, score_items
from nstcam.metrics.curves import Baseline, make_baseline

__all__ = ["faithfulness_correlation"]


def faithfulness_correlation(
    model: nn.Module,
    x: torch.Tensor,
    maps: Any,
    targets: Any,
    *,
    samples: int = 100,
    subset: int = 224,
    baseline: Baseline = "zeros",
    seed: int = 0,
    chunk: int = 32,
) -> torch.Tensor:
    """(N,) Pearson correlation, in [-1, 1], of each map's sum over random pixel subsets with the
    score's fall when they are removed (0 where either side is constant).

    Args:
        samples: random subsets per image (``samples`` forward passes of one image).
        subset: pixels (voxels of a clip) per subset, at most the map's size.
        baseline, chunk: as :func:`nstcam.metrics.deletion_auc`.
    """
    samples = whole("samples", samples, minimum=2)
    inputs = prepare(model, x, maps, targets, chunk)
    n_pix = inputs.maps[0].numel()
    subset = whole("subset", subset, minimum=1, maximum=n_pix)
    gen = torch.Generator().manual_seed(int(seed))
    picks = torch.stack([torch.randperm(n_pix, generator=gen)[:subset] for _ in range(inputs.n * samples)])
    chosen = torch.zeros(inputs.n * samples, n_pix, dtype=torch.bool)
    chosen.scatter_(1, picks, True)
    chosen = chosen.view(inputs.n, samples, n_pix).to(inputs.x.device)
    base = make_baseline(inputs.x, baseline)
    shape = inputs.x.shape[2:]

    def build(n: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
        removed = chosen[n, s].view(-1, 1, *shape)
        return torch.where(removed, base[n], inputs.x[n])

    fall = (inputs.scores[:, None] - score_items(inputs, samples, build)).double().cpu()
    mass = (inputs.maps.flatten(1)[:, None, :].double() * chosen.double()).sum(-1).cpu()
    a, b = mass - mass.mean(1, keepdim=True), fall - fall.mean(1, keepdim=True)
    den = a.norm(dim=1) * b.norm(dim=1)
    return torch.where(den > 0, (a * b).sum(1) / den.clamp_min(1e-300), torch.zeros_like(den)).float()
