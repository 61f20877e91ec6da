"""Which layers the app offers for a model, read from an untrained skeleton (no weights, no memory),
and the check of a layer asked for."""

from __future__ import annotations

import functools

import torch

from nstcam.app.errors import refuse
from nstcam.cam import CAM_ARCHS, arch_kind, candidate_layers
from nstcam.cam.layers import layers

__all__ = ["check_layer", "default_layer", "feature_layer_choices", "layer_choices", "meta_layers"]


@functools.cache
def meta_layers(arch: str) -> dict[str, int]:
    """Valid target layers of a known classifier and their channels, read from an untrained skeleton
    (the meta device where it builds there: no weights, no memory)."""
    from nstcam.cam.layers import arch_spec, skeleton
    from nstcam.hooks import HookManager

    net = skeleton(arch)
    names, side = candidate_layers(net), arch_spec(net).square or 224
    device = next(net.parameters()).device
    with torch.no_grad(), HookManager(net, names, detach=True) as hooks:
        rec = hooks.run(torch.empty(1, 3, side, side, device=device))
    out = {}
    for name in names:
        t = rec.get(name)
        if isinstance(t, torch.Tensor) and t.ndim in (3, 4):
            out[name] = int(t.shape[-1]) if t.ndim == 3 else _channels(t, side)  # tokens: (N, T, C)
    return out


def _channels(t: torch.Tensor, side: int) -> int:
    """Channels of a 4-D activation: (N, C, h, w), or (N, h, w, C) when only that reads as a grid."""
    from nstcam.layouts import LayoutError, detect_layout

    try:
        return int(t.shape[3] if detect_layout(tuple(t.shape), side, side) == "nhwc" else t.shape[1])
    except LayoutError:
        return int(t.shape[1])


def default_layer(arch: str) -> str:
    """The target layer Grad-CAM uses for ``arch`` when none is chosen."""
    from nstcam.cam.layers import arch_spec, skeleton

    return arch_spec(skeleton(arch)).default_layer


def layer_choices(arch: str) -> list[str]:
    """Valid target layers of a known model (no weights, no memory)."""
    if arch_kind(arch) != "classifier":
        return layers(arch)
    if arch not in CAM_ARCHS:
        raise refuse(f"model must be one of {', '.join(CAM_ARCHS)}, got {arch!r}")
    return list(meta_layers(arch))


def check_layer(model: str, layer: str, valid: list[str]) -> None:
    if layer not in valid:
        raise refuse(f"unknown layer {layer!r} for {model}; valid layers: {', '.join(valid)}")


def feature_layer_choices(model: str) -> list[str]:
    """Layers the feature-map viewer offers for ``model``."""
    from nstcam.style import VGG_LAYERS

    if model == "vgg16_bn":
        return list(VGG_LAYERS)
    return layer_choices(model)
