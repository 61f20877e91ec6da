"""What a style loss provides (:class:`StyleLoss`), and what the losses share."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import torch

from nstcam.style._selfcheck import Tolerance

__all__ = ["Feats", "MaskFn", "StyleLoss", "Weights", "no_bytes", "wide"]

Term = Callable[..., torch.Tensor]
Feats = Mapping[str, torch.Tensor]
"""Each layer's features (N, C, H, W), or a style loss' targets, by layer name."""
Weights = Mapping[str, float]
MaskFn = Callable[[str], "torch.Tensor | None"]
"""A layer's position weights (N, 1, H, W), or None: every position counts."""


def wide(t: torch.Tensor) -> torch.Tensor:
    """``t`` in float32 at least (half and bfloat16 widened, float64 kept)."""
    return t.to(torch.promote_types(t.dtype, torch.float32))


def no_bytes(
    width: int, height: int, style_layers: Any, style_scale: float = 1.0, tile: int | None = None
) -> int:
    """A loss that keeps nothing beyond the model's activations and its targets."""
    return 0


@dataclass(frozen=True)
class StyleLoss:
    """One style loss: everything the engine, the memory estimate, the app and the CLI need.

    Attributes:
        name: what ``stylize(style_loss=...)`` takes.
        summary: one line for people (the app's choices, ``--help``).
        reads: what its target reads of a style image: ``"grams"`` (Gram matrices, summed over a
            blend with its weights; of features with a constant channel when ``augment``) or
            ``"positions"`` (the features themselves, kept with their blend weight).
        target: ``target(read, seed)`` -> one layer's target from what was read (the blend's sum
            of Grams, or its list of (features, weight)).
        term: ``term(feats, targets, weights, mask, directions, sqrt)`` -> each image's loss (N,);
            ``mask(name)`` gives a layer's position weights or None.
        augment: Grams of features with a constant channel (means and second moments at once).
        random_directions: it reads random directions drawn per evaluation (L-BFGS keeps one set
            per block of evaluations, so its line searches see one function).
        layer_balance: the layer balance (``style/_balance.py``, measured in Gram terms) applies to
            it; the other losses take the layer weights as given.
        extra_bytes: ``extra_bytes(width, height, style_layers, style_scale, tile)``: memory beyond
            the model's activations (the estimate before a run).
        check: how closely two float32 evaluations of it can agree, where that is looser than the
            compiled step's self-check demands of a well-conditioned loss (``style/_selfcheck.py``);
            None: the self-check's own tolerances.
    """

    name: str
    summary: str
    reads: str
    target: Callable[[Any, int], Any]
    term: Term
    augment: bool = False
    random_directions: bool = False
    layer_balance: bool = False
    extra_bytes: Callable[..., int] = no_bytes
    check: Tolerance | None = None
