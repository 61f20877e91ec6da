"""How a model wants its images: the normalisation, the input size and the resampling.

Weights are trained with one normalisation; given another, a real classifier changes its top class
and its maps without a word (issue 40: an EfficientNet-Lite0 trained with mean = std = 0.5, fed
ImageNet statistics, changed its top-1 class on 3 of 6 photos). A :class:`Preprocess` says what a
model takes; :func:`preprocess_for` reads it, in this order:

1. what the caller gives: ``transform`` (a :class:`Preprocess`, a torchvision weights transform such
   as ``ResNet50_Weights.DEFAULT.transforms()``, or timm's data config ``resolve_data_config(...)``),
   then ``mean`` / ``std`` over it;
2. the model's own: timm's ``pretrained_cfg``, or the torchvision weights nstcam built it with;
3. ImageNet statistics, said once in a warning (a model whose preprocessing nothing tells).

Explanations see the whole image: its shorter side is resized to the input size (a model of fixed
input size: its exact square), never centre-cropped, so that a map covers the photo it explains.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import torch
from PIL import Image
from torch import nn

from nstcam._choices import one_of
from nstcam.image import IMAGENET_MEAN, IMAGENET_STD, denormalize, normalize
from nstcam.weights import VIDEO_ARCHS, weights_info

__all__ = ["INTERPOLATIONS", "Preprocess", "preprocess_for"]

logger = logging.getLogger(__name__)

INTERPOLATIONS = {
    "nearest": Image.Resampling.NEAREST,
    "bilinear": Image.Resampling.BILINEAR,
    "bicubic": Image.Resampling.BICUBIC,
}
"""Resampling a :class:`Preprocess` may name."""


def _triple(name: str, value: Any, positive: bool = False) -> tuple[float, float, float]:
    """Three finite floats (one number is used for all three channels), else a ValueError."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        value = (value,) * 3
    try:
        out = tuple(float(v) for v in value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be 3 numbers (one per RGB channel) or one number") from None
    if len(out) != 3 or not all(math.isfinite(v) for v in out):
        raise ValueError(f"{name} must be 3 finite numbers (one per RGB channel); got {len(out)} values")
    if positive and min(out) <= 0:
        raise ValueError(f"{name} must be above 0 for every channel")
    return out  # type: ignore[return-value]


@dataclass(frozen=True)
class Preprocess:
    """What a model takes.

    Attributes:
        mean: per-channel mean of RGB in [0, 1] that the model subtracts.
        std: per-channel standard deviation it divides by.
        input_size: the shorter side in pixels; None: the engine's own default.
        interpolation: ``"bilinear"``, ``"bicubic"`` or ``"nearest"``.
        source: where these came from (shown in notes and reports).
        bgr: the model takes its channels in BGR order (caffe's); ``mean`` and ``std`` are still
            given per RGB channel. A caffe VGG's (BGR, 0-255, less the means 103.939, 116.779,
            123.68): :meth:`caffe`.
    """

    mean: tuple[float, float, float] = IMAGENET_MEAN
    std: tuple[float, float, float] = IMAGENET_STD
    input_size: int | None = None
    interpolation: str = "bilinear"
    source: str = "given"
    bgr: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "mean", _triple("mean", self.mean))
        object.__setattr__(self, "std", _triple("std", self.std, positive=True))
        one_of("interpolation", self.interpolation, INTERPOLATIONS)
        if self.input_size is not None and (not isinstance(self.input_size, int) or self.input_size < 16):
            raise ValueError("input_size must be a whole number of pixels, 16 or more")

    @classmethod
    def caffe(cls, source: str = "caffe") -> Preprocess:
        """A caffe-trained VGG's (Keras' ``preprocess_input``, neural-style-pt's models): BGR,
        0-255, less the per-channel means (B 103.939, G 116.779, R 123.68), not scaled."""
        means = (123.68, 116.779, 103.939)  # R, G, B
        return cls(tuple(m / 255 for m in means), (1 / 255,) * 3, source=source, bgr=True)  # type: ignore[arg-type]

    def normalize(self, t: torch.Tensor) -> torch.Tensor:
        """``(t - mean) / std`` of a ``(..., 3, H, W)`` RGB tensor in [0, 1], its channels then in
        the model's order."""
        out = normalize(t, self.mean, self.std)
        return out.flip(-3) if self.bgr else out

    def denormalize(self, t: torch.Tensor) -> torch.Tensor:
        """Inverse of :meth:`normalize`."""
        return denormalize(t.flip(-3) if self.bgr else t, self.mean, self.std)

    @property
    def resample(self) -> Image.Resampling:
        return INTERPOLATIONS[self.interpolation]

    @property
    def is_imagenet(self) -> bool:
        return self.mean == IMAGENET_MEAN and self.std == IMAGENET_STD and not self.bgr


def _from_transform(transform: Any) -> Preprocess:
    """A :class:`Preprocess` from a given ``transform`` (see the module docstring)."""
    if isinstance(transform, Preprocess):
        return transform
    if isinstance(transform, Mapping):  # timm's data config
        size = transform.get("input_size")
        return Preprocess(
            transform.get("mean", IMAGENET_MEAN),
            transform.get("std", IMAGENET_STD),
            int(size[-1]) if size else None,
            _interpolation(transform.get("interpolation")),
            "timm data config",
        )
    if hasattr(transform, "mean") and hasattr(transform, "std"):  # torchvision's ImageClassification
        crop = getattr(transform, "crop_size", None)
        size = crop[0] if isinstance(crop, Sequence) and crop else crop
        return Preprocess(
            transform.mean,
            transform.std,
            int(size) if size else None,
            _interpolation(getattr(transform, "interpolation", None)),
            f"{type(transform).__name__} transform",
        )
    raise ValueError(
        "transform must be a nstcam.Preprocess, a torchvision weights transform (weights.transforms()) "
        f"or timm's data config dict; got a {type(transform).__name__}"
    )


def _interpolation(value: Any) -> str:
    """A resampling name from a string or torchvision's ``InterpolationMode``; bilinear otherwise."""
    name = str(getattr(value, "value", value) or "bilinear").lower()
    return name if name in INTERPOLATIONS else "bilinear"


def _from_model(model: nn.Module) -> Preprocess | None:
    """The model's own preprocessing: timm's ``pretrained_cfg``, or nstcam's torchvision weights."""
    cfg = getattr(model, "pretrained_cfg", None)
    if isinstance(cfg, Mapping) and "mean" in cfg and "std" in cfg:
        size = cfg.get("input_size")
        name = cfg.get("architecture") or type(model).__name__
        return Preprocess(
            cfg["mean"],
            cfg["std"],
            int(size[-1]) if size else None,
            _interpolation(cfg.get("interpolation")),
            f"timm pretrained_cfg of {name}",
        )
    info = weights_info(model)
    if info is not None and info.arch in VIDEO_ARCHS:  # Kinetics statistics, each family its own
        official = _from_transform(VIDEO_ARCHS[info.arch][1].transforms())
        return replace(official, source=f"torchvision {info.arch} weights ({info.kind})")
    if info is not None and not info.arch.startswith("timm:"):
        return Preprocess(source=f"torchvision {info.arch} weights ({info.kind})")
    return None


def preprocess_for(
    model: nn.Module,
    *,
    mean: Any = None,
    std: Any = None,
    transform: Any = None,
    warn: bool = True,
    bgr: bool | None = None,
) -> Preprocess:
    """What ``model`` takes: ``transform``, then ``mean`` / ``std`` (and ``bgr``) over it; else the
    model's own; else ImageNet statistics with a warning (see the module docstring)."""
    base = _from_transform(transform) if transform is not None else _from_model(model)
    if base is None:
        if mean is None or std is None:
            if warn:
                logger.warning(
                    "no preprocessing is known for this %s: assuming ImageNet mean/std; pass mean= and "
                    "std= (or transform=) if it was trained with others",
                    type(model).__name__,
                )
            base = Preprocess(source="ImageNet, assumed")
        else:
            base = Preprocess(source="given")
    if mean is not None or std is not None:
        base = replace(
            base,
            mean=base.mean if mean is None else _triple("mean", mean),
            std=base.std if std is None else _triple("std", std, positive=True),
            source="given",
        )
    if bgr is not None and bool(bgr) != base.bgr:
        base = replace(base, bgr=bool(bgr), source="given")
    return base
