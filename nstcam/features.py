"""What the network sees: the activations of one layer, read by the hook manager, as a grid image.

Example:
    >>> fm = feature_maps(StyleTransfer("imagenet"), "cat.jpg", "relu3_1", top=16)
    >>> save_image(fm.grid, "relu3_1.png"); fm.channels[:3], fm.means[:3]
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from PIL import Image, ImageDraw
from torch import nn

from nstcam._checks import whole
from nstcam._mark import tag_weights
from nstcam.hooks import HookManager, eval_view
from nstcam.image import ImageSource, image_to_tensor, load_image, normalize, resize_long_side
from nstcam.preprocess import preprocess_for
from nstcam.style.vgg import VGG_LAYERS, layer_index

__all__ = ["FeatureMaps", "feature_maps"]


@dataclass
class FeatureMaps:
    """One layer's activations for one image.

    Attributes:
        layer: the layer, as asked for.
        activations: float32 (C, h, w), every channel.
        channels: the ``top`` most active channels (highest mean activation first).
        means: their mean activations.
        grid: those channels as a labelled image grid (each channel min-max scaled, viridis).
    """

    layer: str
    activations: np.ndarray
    channels: list[int]
    means: list[float]
    grid: Image.Image = field(repr=False)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready summary (no pixel data)."""
        c, h, w = self.activations.shape
        return {
            "layer": self.layer,
            "shape": [c, h, w],
            "channels": self.channels,
            "means": [round(m, 6) for m in self.means],
        }


def _target(obj: Any, layer: str) -> tuple[nn.Module, str, torch.device, str]:
    """(network, module name, device, kind) for a StyleTransfer, a GradCAM or a plain module."""
    if hasattr(obj, "net") and hasattr(obj, "stylize"):  # StyleTransfer: its VGG's human names
        return obj.net, str(layer_index(layer, obj.layers)), obj.device, "vgg"
    model = obj.model if hasattr(obj, "explain") else obj
    if not isinstance(model, nn.Module):
        raise TypeError(
            "model_or_engine must be a StyleTransfer, a GradCAM or a torch.nn.Module, "
            f"got {type(obj).__name__}"
        )
    device = next(model.parameters(), torch.empty(0)).device
    if layer in VGG_LAYERS and isinstance(getattr(model, "features", None), nn.Sequential):
        return model.features, str(layer_index(layer)), device, "vgg"  # a torchvision vgg16_bn
    return model, layer, device, "module"


def _as_nchw(act: Any, layer: str, x: torch.Tensor) -> torch.Tensor:
    """The layer's output as (N, C, h, w): a ViT's tokens as their grid, Swin's channels-last
    transposed (:mod:`nstcam.layouts`)."""
    from nstcam.layouts import LayoutError, detect_layout, to_nchw

    shape = tuple(getattr(act, "shape", ()))
    if isinstance(act, torch.Tensor) and act.ndim in (3, 4):
        try:
            return to_nchw(act, detect_layout(shape, *x.shape[-2:]), *x.shape[-2:])
        except LayoutError:
            pass
    raise ValueError(
        f"layer {layer!r} outputs {type(act).__name__} {shape}; feature maps need a grid "
        "((N, C, h, w), channels-last or ViT tokens): choose a convolutional layer"
    )


def tile_size(h: int, w: int, cell: int) -> tuple[int, int]:
    """(width, height) of one channel's tile: the map's aspect ratio, ``cell`` px on its long side."""
    scale = cell / max(h, w)
    return max(1, round(w * scale)), max(1, round(h * scale))


def _grid(acts: torch.Tensor, channels: list[int], means: list[float], cell: int) -> Image.Image:
    from matplotlib import colormaps

    cols = max(1, math.ceil(math.sqrt(len(channels))))
    rows = max(1, math.ceil(len(channels) / cols))
    label_h = 14
    tw, th = tile_size(int(acts.shape[-2]), int(acts.shape[-1]), cell)
    col_w = max(tw, 72)  # room for the "#channel  mean" label under a narrow tile
    grid = Image.new("RGB", (cols * col_w, rows * (th + label_h)), "white")
    draw = ImageDraw.Draw(grid)
    cmap = colormaps["viridis"]
    for k, (ch, mean) in enumerate(zip(channels, means, strict=True)):
        a = acts[ch]
        lo, hi = float(a.min()), float(a.max())
        scaled = ((a - lo) / (hi - lo)).numpy() if hi > lo else np.zeros(tuple(a.shape), np.float32)
        tile = Image.fromarray((cmap(scaled)[..., :3] * 255).astype(np.uint8)).resize((tw, th), Image.NEAREST)
        x, y = (k % cols) * col_w, (k // cols) * (th + label_h)
        grid.paste(tile, (x, y + label_h))
        draw.text((x + 2, y + 1), f"#{ch}  {mean:.3g}", fill=(0, 0, 0))
    return grid


def feature_maps(
    model_or_engine: Any,
    image: ImageSource,
    layer: str,
    *,
    top: int = 16,
    input_size: int = 224,
    cell: int = 96,
    mean: Any = None,
    std: Any = None,
) -> FeatureMaps:
    """The activations of ``layer`` for ``image``, and a grid of its ``top`` most active channels.

    Args:
        model_or_engine: a :class:`nstcam.StyleTransfer` (layers by human name, e.g. ``"relu3_1"``),
            a :class:`nstcam.GradCAM` or any ``nn.Module`` (names as in ``named_modules()``, e.g.
            ``"layer3"``; a torchvision vgg16_bn also takes human names).
        image: anything :func:`nstcam.load_image` takes.
        layer: the layer to look at.
        top: how many channels the grid shows.
        input_size: the network sees the image with this long side (VGG) or short side (others;
            a GradCAM uses its own ``input_size``).
        cell: pixels on the long side of each channel's tile (tiles keep the map's aspect ratio).
        mean: a plain model's normalisation mean and ``std`` its standard deviation (default: read
            from the model, else ImageNet's with a warning; :mod:`nstcam.preprocess`); a GradCAM
            uses its own, a StyleTransfer's VGG ImageNet's.

    The forward pass stops once the layer has fired, no hook is left afterwards, and a model in
    training mode is read through an eval-mode twin (its flags are never flipped).
    """
    top = whole("top", top, minimum=1)
    input_size = whole("input_size", input_size, minimum=16)
    cell = whole("cell", cell, minimum=16)
    net, name, device, kind = _target(model_or_engine, layer)
    img = load_image(image)
    if hasattr(model_or_engine, "preprocess"):
        x = model_or_engine.preprocess(img)
    elif kind == "vgg":
        pre = getattr(model_or_engine, "preprocessing", None)  # a StyleTransfer's own (caffe's...)
        x = image_to_tensor(resize_long_side(img, input_size), device)
        x = pre.normalize(x) if pre is not None else normalize(x)
    else:
        pre = preprocess_for(net, mean=mean, std=std)
        w, h = img.size
        s = input_size / min(w, h)
        size = (max(1, round(w * s)), max(1, round(h * s)))
        x = pre.normalize(image_to_tensor(img.resize(size, pre.resample), device))
    net = eval_view(net)
    with torch.no_grad(), HookManager(net, [name], early_stop=True, detach=True) as hooks:
        act = hooks.run(x.to(device))[name]
    act = _as_nchw(act, layer, x)
    acts = act[0].float().cpu()
    means = acts.mean(dim=(1, 2))
    order = torch.argsort(means, descending=True)[:top].tolist()
    chosen = [float(means[c]) for c in order]
    grid = _grid(acts, order, chosen, cell)
    weights = getattr(model_or_engine, "weights", None)  # an engine's: where they came from, on the grid
    if weights is not None:
        tag_weights(grid, weights.notice, weights.is_random)
    return FeatureMaps(layer, acts.numpy(), order, chosen, grid)
