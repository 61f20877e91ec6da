"""The VGGs style transfer runs on: human layer names (``reluB_I``, the I-th ReLU of block B) read off
any VGG's ``features``, and BatchNorm folding."""

from __future__ import annotations

import copy
import re
from collections.abc import Iterable, Mapping

import torch
from torch import nn

from nstcam.hooks import closest_names

__all__ = [
    "STYLE_ARCHS",
    "VGG_LAYERS",
    "deepest_layer",
    "fold_batchnorm",
    "layer_channels",
    "layer_index",
    "layer_stride",
    "vgg_layers",
]

STYLE_ARCHS = ("vgg16_bn", "vgg16", "vgg19", "vgg19_bn")
"""torchvision VGGs a style engine builds by name (its default: ``vgg16_bn``)."""

VGG_LAYERS: dict[str, int] = {
    "relu1_1": 2,
    "relu1_2": 5,
    "relu2_1": 9,
    "relu2_2": 12,
    "relu3_1": 16,
    "relu3_2": 19,
    "relu3_3": 22,
    "relu4_1": 26,
    "relu4_2": 29,
    "relu4_3": 32,
    "relu5_1": 36,
    "relu5_2": 39,
    "relu5_3": 42,
}
"""Human layer names -> index in ``torchvision.models.vgg16_bn().features`` (the ReLU modules); another
VGG's are :func:`vgg_layers` of its features."""

_NAME = re.compile(r"relu([1-5])_([1-9])$")


def vgg_layers(features: nn.Sequential) -> dict[str, int]:
    """Human layer names -> index in a VGG's ``features``, read off its modules: ``reluB_I`` is the
    ReLU after the I-th convolution of block B (blocks end at max-pools). VGG16_bn gives
    :data:`VGG_LAYERS`; VGG16 ``relu1_1`` at 1; VGG19 has ``relu3_4``, ``relu4_4``, ``relu5_4`` too."""
    out: dict[str, int] = {}
    block, conv = 1, 0
    for i, m in enumerate(features):
        if isinstance(m, nn.Conv2d):
            conv += 1
        elif isinstance(m, nn.ReLU) and conv:
            out[f"relu{block}_{conv}"] = i
        elif isinstance(m, nn.MaxPool2d):
            block, conv = block + 1, 0
    return out


def layer_index(name: str, layers: Mapping[str, int] = VGG_LAYERS) -> int:
    """Index in a VGG's ``features`` (``layers``: its :func:`vgg_layers`; default VGG16_bn's) of a
    layer named like ``"relu4_2"``."""
    try:
        return layers[name]
    except KeyError:
        hint = closest_names(name, layers)
        tip = f" (closest: {', '.join(hint)})" if hint else ""
        raise ValueError(f"unknown VGG layer {name!r}{tip}; valid: {', '.join(layers)}") from None


def _block(name: str) -> int:
    m = _NAME.match(name)
    if m is None:
        layer_index(name)  # refused with the valid names
    return int(m[1])  # type: ignore[index]


def layer_stride(name: str) -> int:
    """The stride of layer ``name`` (``reluB_I``: after B - 1 max-pools), in any VGG."""
    return 2 ** (_block(name) - 1)


def layer_channels(name: str) -> int:
    """The channels of layer ``name`` (``reluB_I``: block B's, the same in VGG11 to VGG19)."""
    return (64, 128, 256, 512, 512)[_block(name) - 1]


def deepest_layer(names: Iterable[str]) -> str:
    """The name, among ``names``, of the layer deepest in the network (block, then position)."""

    def depth(name: str) -> tuple[int, int]:
        m = _NAME.match(name)
        if m is None:
            layer_index(name)
        return int(m[1]), int(m[2])  # type: ignore[index]

    return max(names, key=depth)


def fold_batchnorm(features: nn.Sequential) -> nn.Sequential:
    """Returns a copy of ``features`` with each eval-mode BatchNorm folded into the conv before it.

    The folded BatchNorm becomes ``nn.Identity`` so module indices (and layer names) stay the same.
    """
    out = copy.deepcopy(features)
    mods = list(out)
    for i in range(1, len(mods)):
        conv, bn = mods[i - 1], mods[i]
        if not (isinstance(bn, nn.BatchNorm2d) and isinstance(conv, nn.Conv2d)):
            continue
        with torch.no_grad():
            scale = bn.weight / torch.sqrt(bn.running_var + bn.eps)
            conv.weight.mul_(scale.view(-1, 1, 1, 1))
            bias = conv.bias if conv.bias is not None else torch.zeros_like(bn.running_mean)
            new_bias = (bias - bn.running_mean) * scale + bn.bias
            if conv.bias is None:
                conv.bias = nn.Parameter(new_bias)
            else:
                conv.bias.copy_(new_bias)
        out[i] = nn.Identity()
    return out
