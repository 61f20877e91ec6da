"""What every style call runs on: :class:`StyleEngine` builds the frozen VGG features once (VGG16_bn
by default; VGG16, VGG19 and VGG19_bn by name or as a model, each with its own preprocessing) and
holds them in a read-only :class:`~nstcam.style._runtime.Runtime`, with its views and the memory
estimate. :class:`nstcam.StyleTransfer` adds the calls."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import torch
from torch import nn

from nstcam._choices import one_of
from nstcam._device import bf16_autocast, pick_device
from nstcam.preprocess import preprocess_for
from nstcam.style._compiled import compile_stats
from nstcam.style._memory import estimate_run
from nstcam.style._runtime import Runtime, prepare_features
from nstcam.style.vgg import STYLE_ARCHS, vgg_layers
from nstcam.weights import WeightsInfo, announce_weights, build_model, weights_info

__all__ = ["StyleEngine"]

logger = logging.getLogger(__name__)


class StyleEngine:
    """The frozen VGG features every style call runs on (the constructor's arguments:
    :class:`nstcam.StyleTransfer`), their read-only views and the memory estimate."""

    def __init__(
        self,
        weights: str | Path = "imagenet",
        model: nn.Module | None = None,
        device: torch.device | str | None = None,
        *,
        arch: str = "vgg16_bn",
        mean: Any = None,
        std: Any = None,
        transform: Any = None,
        bgr: bool | None = None,
        fold_bn: bool = True,
        amp: bool = False,
        channels_last: bool | None = None,
        seed: int = 0,
        compile: bool | None = None,
    ) -> None:
        device = pick_device(device)
        if model is None:
            one_of("arch", arch, STYLE_ARCHS)
            model = build_model(arch, weights, seed=seed, part="features")  # a file: its convolutions alone
        features = _vgg_features(model)
        self.model = model
        info = weights_info(model) or WeightsInfo(arch, "custom", "user model")
        pre = preprocess_for(model, mean=mean, std=std, transform=transform, bgr=bgr, warn=False)
        channels_last = device.type == "cuda" if channels_last is None else bool(channels_last)
        net = prepare_features(features, device, fold_bn=fold_bn, channels_last=channels_last)
        compile = device.type == "cuda" if compile is None else bool(compile)
        amp = bf16_autocast(bool(amp), device)
        self._rt = Runtime(net, device, amp, channels_last, info, compile, preprocess=pre)
        announce_weights(model)  # once per model, however many engines share it

    # -- read-only views of the runtime --------------------------------------------------------
    net = property(lambda self: self._rt.net, doc="The (folded, frozen) VGG features that run.")
    layers = property(lambda self: self._rt.layers, doc="Its layer names (``reluB_I``) -> indices.")
    preprocessing = property(lambda self: self._rt.preprocess, doc="How the network takes an image.")
    device = property(lambda self: self._rt.device, doc="Where the engine runs.")
    weights = property(lambda self: self._rt.weights, doc="Where the weights came from.")
    amp = property(lambda self: self._rt.amp, doc="bfloat16 autocast on CUDA.")
    channels_last = property(lambda self: self._rt.channels_last, doc="Channels-last inputs.")
    compile_stats = property(lambda self: compile_stats(self._rt), doc=compile_stats.__doc__)
    compiles = property(lambda self: self._rt.compile, doc="Steps run compiled (calls on one owner thread).")

    style_target_computations = property(lambda self: self._rt.style_targets.value, doc="Gram targets made.")

    def estimate_memory(
        self,
        width: int,
        height: int,
        *,
        optimizer: str = "lbfgs",
        history_size: int = 50,
        deepest: str = "relu5_1",
        steps: int | None = None,
        batch: int = 1,
        tile: int | None = None,
        style_loss: str = "gram",
    ) -> int:
        """Peak bytes a run at ``width`` x ``height`` (tiled above ``tile``; ``style_loss="sliced"``: with its
        projections) needs beyond the engine, calibrated on measured peaks (``style/_memory.py``)."""
        return estimate_run(
            self._rt,
            width,
            height,
            optimizer=optimizer,
            history_size=history_size,
            deepest=deepest,
            steps=steps,
            batch=batch,
            tile=tile,
            style_loss=style_loss,
        )

    def __repr__(self) -> str:
        return f"{type(self).__name__}(weights={self.weights.notice!r}, device={str(self.device)!r})"


def _vgg_features(model: nn.Module) -> nn.Sequential:
    """``model.features`` where it is a VGG's: convolutions, ReLUs, max-pools and BatchNorms only,
    the five blocks of VGG11 to VGG19 (torchvision's layout: a caffe model converted to it too)."""
    features = getattr(model, "features", None)
    kinds = (nn.Conv2d, nn.ReLU, nn.MaxPool2d, nn.BatchNorm2d, nn.Identity)
    ok = isinstance(features, nn.Sequential) and all(isinstance(m, kinds) for m in features)
    if not ok or "relu5_1" not in vgg_layers(features):  # type: ignore[arg-type]
        raise TypeError(
            "model must be a torchvision VGG (model.features: convolutions, ReLUs and max-pools, in five "
            f"blocks): build one with nstcam.build_model(arch) for arch in {', '.join(STYLE_ARCHS)}, or "
            "torchvision.models.vgg19()"
        )
    return features  # type: ignore[return-value]
