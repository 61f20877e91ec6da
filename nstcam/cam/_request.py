"""What every CAM pass takes (:class:`Request`) and returns (:data:`Outputs`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

__all__ = ["Outputs", "Request", "TargetRequest"]

Outputs = tuple[torch.Tensor, torch.Tensor, torch.Tensor]
"""(raws (k, N, h, w) after ReLU, probs (N, classes), classes (k, N))."""


@dataclass(frozen=True)
class Request:
    """One method's call on one batch.

    Attributes:
        model: the network (an eval-mode view; never altered).
        layer: the target layer's name.
        x: the normalised batch (N, 3, H, W).
        classes: ``classes(logits)`` -> the (k, N) classes to explain.
        chunk: masked images per forward pass (perturbation methods).
        progress: ``progress(done, total)`` after each forward pass of a perturbation method.
        layout: the layer's layout (None: read from the shape).
        eigen_smooth: the weighted activations' first principal component instead of their sum.
        seed: seeds the call's random numbers (RandomCAM's weights, noise).
        n_samples: noisy or integrated samples (Smooth Grad-CAM++ 4, SS-CAM 35, IS-CAM 10 if None).
        std: the noise's standard deviation (Smooth Grad-CAM++ 0.3 in normalised input units, SS-CAM
            2.0 in mask units, if None).
    """

    model: nn.Module
    layer: str
    x: torch.Tensor
    classes: Callable[[torch.Tensor], torch.Tensor]
    chunk: int = 32
    progress: Callable[[int, int], None] | None = None
    layout: str | None = None
    eigen_smooth: bool = False
    seed: int = 0
    n_samples: int | None = None
    std: float | None = None

    def generator(self) -> torch.Generator:
        return torch.Generator(device=self.x.device).manual_seed(self.seed)


@dataclass(frozen=True)
class TargetRequest:
    """A perturbation method's call on target objects: what its channel weights read.

    Attributes:
        model: the network (an eval-mode view; never altered).
        layer: the target layer's name; layout: its layout (None: read from the shape).
        x: the normalised batch (N, 3, H, W).
        native: the layer's output as the model gives it (a tensor, or a dict of levels).
        a: that output read as (N, C, h, w) (levels side by side on the finest grid).
        rows: k rows of one target per image (a detector's k boxes...).
        base: (k, N) the targets' scores on the unchanged images.
        chunk: changed images per forward pass; seed, n_samples, std: as :class:`Request`'s.
        done: ``done(m)`` after each forward pass of ``m`` changed images (the progress).
    """

    model: nn.Module
    layer: str
    layout: str | None
    x: torch.Tensor
    native: Any
    a: torch.Tensor
    rows: Sequence[Sequence[Any]]
    base: torch.Tensor
    chunk: int
    seed: int
    n_samples: int | None
    std: float | None
    done: Callable[[int], None]
