"""Planning a run: every parameter of :meth:`StyleTransfer.stylize` checked and resolved once."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from nstcam._checks import finite, whole
from nstcam.style._balance import balanced_weights
from nstcam.style.losses import style_loss_named
from nstcam.style.vgg import VGG_LAYERS, layer_index

__all__ = ["DEFAULT_CONTENT_LAYERS", "DEFAULT_STYLE_LAYERS", "Plan", "auto_scales", "make_plan"]

DEFAULT_STYLE_LAYERS = ("relu1_1", "relu2_1", "relu3_1", "relu4_1", "relu5_1")
DEFAULT_CONTENT_LAYERS = ("relu4_2",)
OPTIMIZERS = ("lbfgs", "adam")
INITS = ("content", "noise", "style", "style_stats", "fast")


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


def auto_scales(size: int) -> list[int]:
    """``size`` alone up to 512 px; above, halving down to 256 px (coarse to fine)."""
    scales = [size]
    if size > 512:
        while scales[0] // 2 >= 256:
            scales.insert(0, scales[0] // 2)
    return scales


def _check_choice(name: str, value: str, choices: Sequence[str]) -> None:
    if value not in choices:
        raise ValueError(f"{name} must be one of {tuple(choices)}, got {value!r}")


def _preserve_color(value: bool | str | None) -> str | bool:
    """``True`` keeps meaning luminance; ``False``/``None`` and ``"off"`` mean no preservation."""
    if value is True or value == "luminance":
        return "luminance"
    if value == "histogram":
        return "histogram"
    if value in (False, None, "off", "none"):
        return False
    raise ValueError(f"preserve_color must be 'luminance', 'histogram' or False, got {value!r}")


def _check_weights(**weights: float) -> None:
    for name, v in weights.items():
        finite(name, v, minimum=0)


def _scales_and_steps(
    size: int, scales: Sequence[int] | None, steps: int | Sequence[int]
) -> tuple[list[int], list[int]]:
    size = whole("size", size, minimum=16)
    if scales:
        scales = [whole("scales", s, minimum=16) for s in scales]
        if scales != sorted(scales):
            raise ValueError(f"scales must be increasing long sides of at least 16 px, got {scales}")
    else:
        scales = auto_scales(size)
    if isinstance(steps, (str, bytes)) or not hasattr(steps, "__iter__"):
        steps_list = [whole("steps", steps, minimum=1)] * len(scales)
    else:
        steps_list = [whole("steps", s, minimum=1) for s in steps]
        if len(steps_list) != len(scales):
            raise ValueError(f"steps must be one count or one count per scale {scales}, got {steps!r}")
    return scales, steps_list


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
    *,
    n_styles: int,
    size: int,
    steps: int | Sequence[int],
    style_weight: float,
    content_weight: float,
    tv_weight: float,
    optimizer: str,
    init: str | object,
    style_weights: Sequence[float] | None,
    style_layers: Sequence[str] | Mapping[str, float] | None,
    content_layers: Sequence[str] | None,
    style_scale: float,
    preserve_color: bool | str,
    mask_mode: str,
    scales: Sequence[int] | None,
    seed: int | None,
    lr: float | None,
    history_size: int,
    preview_every: int,
    on_memory: str,
    progress_every: int | None = None,
    tile: int | None = None,
    tile_overlap: int | None = None,
    style_loss: str = "gram",
    average: float | bool = False,
    layer_balance: bool = True,
    known_layers: Mapping[str, int] = VGG_LAYERS,
    balance: Mapping[str, float] | None = None,
) -> Plan:
    """Checks the keywords of :meth:`StyleTransfer.stylize` and resolves their defaults;
    ``known_layers``: the network's layer names (:func:`~nstcam.style.vgg.vgg_layers`); ``balance``:
    its layer balance (:func:`~nstcam.style._balance.layer_balance`), applied with ``layer_balance``.

    Raises:
        ValueError: a parameter is out of range; the message names it and what it accepts.
    """
    _check_choice("optimizer", optimizer, OPTIMIZERS)
    if isinstance(init, str):
        _check_choice("init", init, INITS)
    else:  # an image, given to the run itself
        init = "image"
    _check_choice("on_memory", on_memory, ("error", "reduce"))
    style_loss_named(style_loss)  # an unknown loss refused, listing the registry's
    _check_choice("mask_mode", mask_mode, ("optimize", "blend"))
    scales_list, steps_list = _scales_and_steps(size, scales, steps)
    _check_weights(style_weight=style_weight, content_weight=content_weight, tv_weight=tv_weight)
    if not finite("style_scale", style_scale) > 0:
        raise ValueError(f"style_scale must be > 0, got {style_scale!r}")
    layers, content = _layers(style_layers, content_layers, known_layers)
    if not isinstance(layer_balance, bool):
        raise ValueError(f"layer_balance must be True or False, got {layer_balance!r}")
    if layer_balance and balance:
        layers, style_weight = balanced_weights(layers, style_weight, balance)
    seed = int(torch.randint(0, 2**31 - 1, (1,)).item()) if seed is None else whole("seed", seed, minimum=0)
    preview_every = whole("preview_every", preview_every, minimum=0)
    history_size = whole("history_size", history_size, minimum=1)
    if lr is not None:
        lr = finite("lr", lr)
        if lr <= 0:
            raise ValueError(f"lr must be > 0, got {lr:g}")
    plan = Plan(
        size=scales_list[-1],
        scales=scales_list,
        steps=steps_list,
        style_layers=layers,
        content_layers=content,
        style_weight=float(style_weight),
        content_weight=float(content_weight),
        tv_weight=float(tv_weight),
        optimizer=optimizer,
        init=init,
        blend=_blend(n_styles, style_weights),
        style_scale=float(style_scale),
        preserve_color=_preserve_color(preserve_color),
        seed=int(seed),
        lr=float(lr if lr is not None else (1.0 if optimizer == "lbfgs" else 0.02)),
        history_size=int(history_size),
        preview_every=int(preview_every),
    )
    if tile is not None:
        plan.tile = whole("tile", tile, minimum=64)
        default = min(64, plan.tile // 4)
        plan.tile_overlap = whole(
            "tile_overlap",
            default if tile_overlap is None else tile_overlap,
            minimum=0,
            maximum=plan.tile // 4,
        )
    elif tile_overlap is not None:
        plan.tile_overlap = whole("tile_overlap", tile_overlap, minimum=0)
    plan.extra["on_memory"] = on_memory
    if progress_every is not None:
        plan.extra["progress_every"] = whole("progress_every", progress_every, minimum=1)
    plan.extra["mask_mode"] = mask_mode
    plan.style_loss = style_loss
    if average is not False and average is not None:
        plan.average = finite("average", average)
        if not 0 < plan.average < 1:
            raise ValueError(f"average must be a decay in (0, 1) such as 0.99, or False; got {average!r}")
    return plan
