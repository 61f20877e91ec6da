"""All the metrics of one batch of maps at once: :func:`faithfulness` and :class:`Faithfulness`."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import nn

from nstcam._checks import finite, whole
from nstcam.metrics._scores import prepare, trapezoid
from nstcam.metrics.confidence import masked_scores
from nstcam.metrics.curves import curve, make_baseline
from nstcam.metrics.road import PERCENTILES, road_scores

__all__ = ["Faithfulness", "faithfulness"]


@dataclass(frozen=True)
class Faithfulness:
    """How well one map explains one image's score.

    Attributes:
        score: the target's softmax score on the unperturbed image.
        confidence_change: score on ``x * map`` minus ``score`` (higher is better).
        deletion_auc: area under the deletion curve (lower is better).
        insertion_auc: area under the insertion curve (higher is better).
        road: (LeRF - MoRF) / 2 averaged over the percentiles (higher is better).
        deletion_curve: the target's score with 0, 1/steps, ..., all pixels removed.
        insertion_curve: the same as pixels are inserted into the blurred image.
    """

    score: float
    confidence_change: float
    deletion_auc: float
    insertion_auc: float
    road: float
    deletion_curve: np.ndarray = field(repr=False)
    insertion_curve: np.ndarray = field(repr=False)

    def as_dict(self, curves: bool = False) -> dict[str, Any]:
        """The figures (rounded to 6 places), and the curves as lists when ``curves``."""
        out = {
            k: round(getattr(self, k), 6)
            for k in ("confidence_change", "deletion_auc", "insertion_auc", "road")
        }
        if curves:
            out["deletion_curve"] = [round(float(v), 6) for v in self.deletion_curve]
            out["insertion_curve"] = [round(float(v), 6) for v in self.insertion_curve]
        return out


def faithfulness(
    model: nn.Module,
    x: torch.Tensor,
    maps: Any,
    targets: Any,
    *,
    steps: int = 20,
    percentiles: Sequence[int] = PERCENTILES,
    noise: float = 0.01,
    seed: int = 0,
    chunk: int = 32,
) -> list[Faithfulness]:
    """Confidence change, deletion and insertion AUC and ROAD for each image, from one check of
    the inputs and one unperturbed forward pass.

    Args:
        model: a classifier returning logits.
        x: normalised batch (N, 3, H, W).
        maps: (N, H, W) in [0, 1].
        targets: one class for all images, or one per image.
        steps: points of the deletion and insertion curves, less one.
        percentiles: ROAD's shares of pixels removed, in %.
        noise: ROAD's imputation noise.
        seed: ROAD's noise seed.
        chunk: perturbed images per forward pass.

    Returns:
        One :class:`Faithfulness` per image. Each costs ``2 * steps + 2 * len(percentiles) + 4``
        forward passes of one image (64 with the defaults).
    """
    steps = whole("steps", steps, minimum=1)
    ps = [whole("percentiles", p, minimum=1, maximum=99) for p in percentiles]
    noise = finite("noise", noise, minimum=0)
    inputs = prepare(model, x, maps, targets, chunk)
    change = masked_scores(inputs) - inputs.scores
    deletion = curve(inputs, steps, make_baseline(inputs.x, "zeros"), insert=False)
    insertion = curve(inputs, steps, make_baseline(inputs.x, "blur"), insert=True)
    road_value, _, _ = road_scores(inputs, ps, noise, whole("seed", seed))
    columns = [inputs.scores, change, trapezoid(deletion), trapezoid(insertion), road_value]
    rows = torch.stack(columns, 1).cpu().tolist()
    deletion, insertion = deletion.cpu().numpy(), insertion.cpu().numpy()
    return [
        Faithfulness(*row, deletion_curve=deletion[i], insertion_curve=insertion[i])
        for i, row in enumerate(rows)
    ]
