"""Post-processing of any method: test-time augmentation (``aug_smooth``) and maps of several layers
fused into one (``fuse``)."""

from __future__ import annotations

from collections.abc import Callable

import torch

from nstcam.cam._maps import normalize_maps, resize_grid

__all__ = ["AUGMENTATIONS", "FUSIONS", "OTHERS", "augmented", "augmented_batch", "deaugmented", "fuse_maps"]

AUGMENTATIONS = tuple((flip, factor) for flip in (False, True) for factor in (0.9, 1.0, 1.1))
"""pytorch-grad-cam's ``aug_smooth``: horizontal flip x brightness (the normalised input times 0.9,
1, 1.1)."""

FUSIONS = ("mean", "max", "product")


def _at(raws: torch.Tensor, size: tuple[int, ...]) -> torch.Tensor:
    """(k, N, *grid) raw maps, each min-max scaled, at ``size`` ((H, W), or a clip's (T, H, W))."""
    k, n = raws.shape[:2]
    flat = normalize_maps(raws.reshape(k * n, *raws.shape[2:]).float())
    return resize_grid(flat.unsqueeze(1), size)[:, 0].reshape(k, n, *size)


def fuse_maps(per_layer: list[torch.Tensor], how: str, size: tuple[int, ...]) -> torch.Tensor:
    """Raw maps of several layers (each (k, N, h_l, w_l)), scaled and brought to ``size``, fused:
    their mean, their maximum, or their product (RefineCAM). Returns (k, N, *size)."""
    maps = torch.stack([_at(r, size) for r in per_layer])
    if how == "mean":
        return maps.mean(0)
    if how == "max":
        return maps.amax(0)
    return maps.prod(0)


def augmented(
    run: Callable[[torch.Tensor, torch.Tensor | None], tuple[torch.Tensor, torch.Tensor, torch.Tensor]],
    x: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``aug_smooth``: ``run(x, None)`` explains the input and picks its classes; the five other
    augmentations run as one batch with those classes (``run(batch, classes)``); each map is scaled
    at the input's size, de-augmented and the six are averaged. Returns (k, N, H, W) maps, and the
    input's probabilities and classes."""
    raws, probs, classes = run(x, None)
    more, _, _ = run(augmented_batch(x), classes.repeat(1, len(OTHERS)))
    return deaugmented(raws, more, tuple(x.shape[-2:])), probs, classes


OTHERS = tuple(a for a in AUGMENTATIONS if a != (False, 1.0))
"""The augmentations besides the input itself, in the order of :func:`augmented_batch`."""


def augmented_batch(x: torch.Tensor) -> torch.Tensor:
    """The five other augmentations of the batch ``x``, one after the other: (5 N, C, H, W)."""
    return torch.cat([(x.flip(-1) if flip else x) * factor for flip, factor in OTHERS])


def deaugmented(raws: torch.Tensor, more: torch.Tensor, size: tuple[int, int]) -> torch.Tensor:
    """The mean of the input's (k, N, h, w) maps and the others' (k, 5 N, h, w), each scaled at
    ``size`` and flipped back: (k, N, *size)."""
    total = _at(raws, size)
    n = raws.shape[1]
    scaled = _at(more, size)
    for i, (flip, _) in enumerate(OTHERS):
        part = scaled[:, i * n : (i + 1) * n]
        total = total + (part.flip(-1) if flip else part)
    return total / len(AUGMENTATIONS)
