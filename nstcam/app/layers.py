"""Which layers the app offers for a model, read from an untrained skeleton (no weights, no memory),
and the check of a layer asked for."""

from __future__ import annotations

import functools

import torch

from nstcam._choices import one_of
from nstcam.app.errors import refuse
from nstcam.cam import CAM_ARCHS, arch_kind, candidate_layers
from nstcam.cam.layers import layers

__all__ = [
    "check_layer",
    "default_layer",
    "feature_layer_choices",
    "layer_choices",
    "meta_grid",
    "meta_layers",
    "meta_side",
]


@functools.cache
def _skeleton_shapes(arch: str) -> tuple[int, dict[str, tuple[int, ...]]]:
    """The side a known classifier's untrained skeleton is run at (the meta device where it builds
    there: no weights, no memory) and its candidate layers' output shapes."""
    from nstcam.cam.layers import arch_spec, skeleton
    from nstcam.hooks import HookManager

    net = skeleton(arch)
    names, side = candidate_layers(net), arch_spec(net).square or 224
    device = next(net.parameters()).device
    with torch.no_grad(), HookManager(net, names, detach=True) as hooks:
        rec = hooks.run(torch.empty(1, 3, side, side, device=device))
    return side, {n: tuple(t.shape) for n in names if isinstance(t := rec.get(n), torch.Tensor)}


@functools.cache
def meta_layers(arch: str) -> dict[str, int]:
    """Valid target layers of a known classifier and their channels, read from an untrained skeleton."""
    side, shapes = _skeleton_shapes(arch)
    return {
        name: shape[-1] if len(shape) == 3 else shape[_channel_axis(shape, side)]  # tokens: (N, T, C)
        for name, shape in shapes.items()
        if len(shape) in (3, 4)
    }


def meta_grid(arch: str, layer: str) -> tuple[int, int] | None:
    """``layer``'s grid (h, w) at the skeleton's side (:func:`meta_side`), or None for tokens or a
    layer that is not one of the model's candidates."""
    side, shapes = _skeleton_shapes(arch)
    shape = shapes.get(layer)
    if shape is None or len(shape) != 4:
        return None
    return (shape[1], shape[2]) if _channel_axis(shape, side) == 3 else (shape[2], shape[3])


def meta_side(arch: str) -> int:
    """The side :func:`meta_layers` and :func:`meta_grid` read the skeleton at."""
    return _skeleton_shapes(arch)[0]


def _channel_axis(shape: tuple[int, ...], side: int) -> int:
    """Where a 4-D activation keeps its channels: 1 (N, C, h, w), or 3 (N, h, w, C) when only that
    reads as a grid."""
    from nstcam.layouts import LayoutError, detect_layout

    try:
        return 3 if detect_layout(shape, side, side) == "nhwc" else 1
    except LayoutError:
        return 1


def default_layer(arch: str) -> str:
    """The target layer Grad-CAM uses for ``arch`` when none is chosen."""
    from nstcam.cam.layers import arch_spec, skeleton

    return arch_spec(skeleton(arch)).default_layer


def layer_choices(arch: str) -> list[str]:
    """Valid target layers of a known model (no weights, no memory)."""
    if arch_kind(arch) != "classifier":
        return layers(arch)
    one_of("model", arch, CAM_ARCHS, error=refuse)
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
