"""How faithful are an explanation's maps: the metrics of :mod:`nstcam.metrics` for each class's
map, beside a random map's (the figure a map with no information gets)."""

from __future__ import annotations

import torch
from torch import nn

from nstcam.cam._maps import upsample_maps
from nstcam.metrics import Faithfulness, faithfulness, random_map

__all__ = ["evaluate_maps"]


def evaluate_maps(
    model: nn.Module, x: torch.Tensor, raws: list[torch.Tensor], classes: list[int], steps: int
) -> list[tuple[Faithfulness, Faithfulness]]:
    """(map's, random map's) metrics per class, for one image ``x`` (1, 3, H, W) and its raw maps
    (one (1, h, w) map per class), measured at the network input's size."""
    k, (h, w) = len(classes), x.shape[-2:]
    maps = torch.cat([upsample_maps(r, (h, w)) for r in raws])
    xk = x.expand(k, -1, -1, -1)
    ours = faithfulness(model, xk, maps, classes, steps=steps)
    chance = faithfulness(model, xk, random_map(k, h, w, seed=0, device=x.device), classes, steps=steps)
    return list(zip(ours, chance, strict=True))
