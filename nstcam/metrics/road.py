"""ROAD, RemOve And Debias (Rong et al. 2022): remove the most relevant (MoRF) and the least
relevant (LeRF) p % of the pixels, for p = 10, 20, ..., 90, with noisy linear imputation, and
compare the scores: ``mean_p (LeRF_p - MoRF_p) / 2``, higher is better."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from nstcam._checks import finite, whole
from nstcam.metrics._impute import noisy_linear_impute
from nstcam.metrics._scores import Inputs, prepare, rank_pixels, score_items

__all__ = ["PERCENTILES", "road", "road_scores"]

PERCENTILES = (10, 20, 30, 40, 50, 60, 70, 80, 90)


def road(
    model: nn.Module,
    x: torch.Tensor,
    maps: Any,
    targets: Any,
    *,
    percentiles: Sequence[int] = PERCENTILES,
    noise: float = 0.01,
    seed: int = 0,
    chunk: int = 32,
    return_curves: bool = False,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(N,) ROAD score: the mean over ``percentiles`` of (LeRF - MoRF) / 2.

    Args:
        model: a classifier returning logits.
        x: normalised batch (N, 3, H, W).
        maps: (N, H, W) in [0, 1].
        targets: one class for all images, or one per image.
        percentiles: shares of the pixels removed, in % (each in 1..99).
        noise: standard deviation of the noise added to imputed pixels (in normalised units).
        seed: the noise's seed: the same call gives the same number, chunked any way, on any device.
        chunk: perturbed images per forward pass (bounds memory).
        return_curves: also return the MoRF and LeRF score curves, each (N, len(percentiles)).
    """
    ps = [whole("percentiles", p, minimum=1, maximum=99) for p in percentiles]
    if not ps:
        raise ValueError("percentiles must name at least one share of pixels, e.g. (10, 20, ..., 90)")
    noise = finite("noise", noise, minimum=0)
    seed = whole("seed", seed)
    inputs = prepare(model, x, maps, targets, chunk)
    value, morf, lerf = road_scores(inputs, ps, noise, seed)
    return (value, morf, lerf) if return_curves else value


def road_scores(
    inputs: Inputs, ps: Sequence[int], noise: float, seed: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """ROAD of checked inputs: (N,) values, and the (N, len(ps)) MoRF and LeRF score curves."""
    hw = inputs.maps[0].numel()
    ranks = rank_pixels(inputs.maps)
    counts = torch.tensor([round(p * hw / 100) for p in ps], device=inputs.x.device)
    shape = inputs.x.shape[1:]
    k = len(ps)

    def build(n: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
        count = counts[s % k][:, None]
        most = (s < k)[:, None]  # the first k items per image remove the most relevant pixels
        removed = torch.where(most, ranks[n] < count, ranks[n] >= hw - count)
        eps = torch.stack([_noise(seed, i, j, shape) for i, j in zip(n.tolist(), s.tolist(), strict=True)])
        return noisy_linear_impute(
            inputs.x[n], removed.view(-1, 1, *shape[1:]), noise * eps.to(inputs.x.device)
        )

    scores = score_items(inputs, 2 * k, build)
    morf, lerf = scores[:, :k], scores[:, k:]
    return ((lerf - morf) / 2).mean(1), morf, lerf


def _noise(seed: int, image: int, item: int, shape: torch.Size) -> torch.Tensor:
    """Standard normal noise of one perturbed image, drawn on the CPU from its own seed."""
    g = torch.Generator().manual_seed(seed * 1_000_003 + image * 1_009 + item)
    return torch.randn(shape, generator=g)
