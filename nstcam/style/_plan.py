"""Planning a run: every parameter of :meth:`StyleTransfer.stylize` checked and resolved once."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from nstcam._checks import finite
from nstcam.style._balance import balanced_weights
from nstcam.style.losses import style_loss_named
from nstcam.style.options import (
    PREVIEW_SIDE,
    StyleOptions,
    auto_scales,
    preserve_color_mode,
    scales_and_steps,
    strength_weight,
    tile_overlap,
)
from nstcam.style.vgg import VGG_LAYERS, layer_index

__all__ = ["DEFAULT_CONTENT_LAYERS", "DEFAULT_STYLE_LAYERS", "Plan", "auto_scales", "make_plan"]

DEFAULT_STYLE_LAYERS = ("relu1_1", "relu2_1", "relu3_1", "relu4_1", "relu5_1")
DEFAULT_CONTENT_LAYERS = ("relu4_2",)


@dataclass
class Plan:
    """Everything a run needs, resolved and validated once. Each call works on its own copy."""

    size: int
    scales: list[int]
    steps: list[int]
    style_layers: dict[str, float]
    content_layers: list[str]
    style_weight: float
    content_weight: float
    tv_weight: float
    optimizer: str
    init: str
    blend: list[float]
    style_scale: float
    preserve_color: str | bool  # "luminance", "histogram" or False
    seed: int
    lr: float
    history_size: int
    preview_every: int
    tile: int | None = None
    tile_overlap: int = 64
    style_loss: str = "gram"
    average: float | None = None
    tolerance: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def luminance(self) -> bool:
        """The network sees luminance only and the output takes the content's chroma."""
        return self.preserve_color == "luminance"

    @property
    def histogram(self) -> bool:
        """The style images are recoloured to the content's colour statistics first."""
        return self.preserve_color == "histogram"

    @property
    def layers(self) -> list[str]:
        """Style and content layers, each once."""
        return list(dict.fromkeys([*self.style_layers, *self.content_layers]))

    def as_dict(self) -> dict[str, Any]:
        d = {k: v for k, v in self.__dict__.items() if k != "extra"}
        d.update(self.extra)
        return d


def _blend(n_styles: int, style_weights: Sequence[float] | None) -> list[float]:
    if style_weights is None:
        return [1.0 / n_styles] * n_styles
    blend = [finite("style_weights", w, minimum=0) for w in style_weights]
    if len(blend) != n_styles:
        raise ValueError(f"style_weights has {len(blend)} values for {n_styles} style images")
    if any(w < 0 for w in blend) or sum(blend) <= 0:
        raise ValueError(f"style_weights must be >= 0 with a positive sum, got {blend}")
    return [w / sum(blend) for w in blend]


def _layers(
    style_layers: Sequence[str] | Mapping[str, float] | None,
    content_layers: Sequence[str] | None,
    known: Mapping[str, int] = VGG_LAYERS,
) -> tuple[dict[str, float], list[str]]:
    if style_layers is None:
        layers = dict.fromkeys(DEFAULT_STYLE_LAYERS, 1.0)
    elif isinstance(style_layers, Mapping):
        layers = {k: finite(f"style_layers[{k!r}]", v, minimum=0) for k, v in style_layers.items()}
    else:
        layers = dict.fromkeys(style_layers, 1.0)
    content = list(content_layers or DEFAULT_CONTENT_LAYERS)
    for name in [*layers, *content]:
        layer_index(name, known)
    if not layers or sum(layers.values()) <= 0 or any(v < 0 for v in layers.values()):
        raise ValueError(f"style_layers needs at least one layer with a positive weight, got {layers}")
    return layers, content


def make_plan(
    options: StyleOptions,
    *,
    n_styles: int,
    known_layers: Mapping[str, int] = VGG_LAYERS,
    balance: Mapping[str, float] | None = None,
) -> Plan:
    """``options`` (checked when made) resolved for a run on a network with ``n_styles`` style
    images: the scales and their steps, the layers (``known_layers``: the network's names,
    :func:`~nstcam.style.vgg.vgg_layers`) weighted by the network's ``balance``
    (:func:`~nstcam.style._balance.layer_balance`, applied with ``layer_balance`` to the losses whose
    record says ``layer_balance``: Gram's), the blend, a
    drawn seed where none was given, the optimiser's learning rate.

    Raises:
        ValueError: what depends on the network or the styles is out of range (a layer's name,
            ``style_weights``' length); the message names it and what it accepts.
    """
    o = options
    scales_list, steps_list = scales_and_steps(o.size, o.scales, o.steps)
    layers, content = _layers(o.style_layers, o.content_layers, known_layers)
    style_weight = strength_weight(o.strength) if o.style_weight is None else o.style_weight
    # measured in Gram terms, the balance would re-weight W2 and sliced by another loss's magnitudes
    balanced = bool(o.layer_balance and balance and style_loss_named(o.style_loss).layer_balance)
    if balanced:
        layers, style_weight = balanced_weights(layers, style_weight, balance)
    seed = int(torch.randint(0, 2**31 - 1, (1,)).item()) if o.seed is None else int(o.seed)
    plan = Plan(
        size=scales_list[-1],
        scales=scales_list,
        steps=steps_list,
        style_layers=layers,
        content_layers=content,
        style_weight=float(style_weight),
        content_weight=float(o.content_weight),
        tv_weight=float(o.tv_weight),
        optimizer=o.optimizer,
        init=o.init if isinstance(o.init, str) else "image",  # an image is given to the run itself
        blend=_blend(n_styles, o.style_weights),
        style_scale=float(o.style_scale),
        preserve_color=preserve_color_mode(o.preserve_color),
        seed=seed,
        lr=float(o.lr if o.lr is not None else (1.0 if o.optimizer == "lbfgs" else 0.02)),
        history_size=int(o.history_size),
        preview_every=int(o.preview_every),
        tile=None if o.tile is None else int(o.tile),
        tile_overlap=tile_overlap(o.tile, o.tile_overlap),
        style_loss=o.style_loss,
        average=None if o.average is False or o.average is None else float(o.average),
        tolerance=float(o.tolerance),
    )
    plan.extra["on_memory"] = o.on_memory
    plan.extra["layer_balance_applied"] = balanced
    plan.extra["strength"] = None if o.style_weight is not None else float(o.strength)  # None: overridden
    if o.progress_every is not None:
        plan.extra["progress_every"] = int(o.progress_every)
    plan.extra["mask_mode"] = o.mask_mode
    plan.extra["auto_steps"] = o.steps is None  # fitted to the photo's shape by the run
    # a print of the preview (issue 76): its plan runs first, then refines; tiled past PRINT_MEMORY
    plan.extra["print_from"] = PREVIEW_SIDE if o.scales is None and plan.size > PREVIEW_SIDE else None
    return plan
