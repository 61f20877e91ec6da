"""VGG16_bn for style transfer: human layer names and BatchNorm folding."""

from __future__ import annotations

import copy
from collections.abc import Iterable

import torch
from torch import nn

from nstcam.hooks import closest_names

__all__ = ["VGG_LAYERS", "deepest_layer", "fold_batchnorm", "layer_channels", "layer_index", "layer_stride"]

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
"""Human layer names -> index in ``torchvision.models.vgg16_bn().features`` (the ReLU modules)."""


def layer_index(name: str) -> int:
    """Index in ``vgg16_bn().features`` of a layer named like ``"relu4_2"``."""
    try:
        return VGG_LAYERS[name]
    except KeyError:
        hint = closest_names(name, VGG_LAYERS)
        tip = f" (closest: {', '.join(hint)})" if hint else ""
        raise ValueError(f"unknown VGG16_bn layer {name!r}{tip}; valid: {', '.join(VGG_LAYERS)}") from None


def layer_stride(name: str) -> int:
    """The stride of layer ``name`` (``reluB_I``: after B - 1 max-pools)."""
    layer_index(name)  # an unknown name is refused with the valid ones
    return 2 ** (int(name[4]) - 1)


def layer_channels(name: str) -> int:
    """The channels of layer ``name`` (``reluB_I``: VGG16's block B)."""
    layer_index(name)  # an unknown name is refused with the valid ones
    return (64, 128, 256, 512, 512)[int(name[4]) - 1]


def deepest_layer(names: Iterable[str]) -> str:
    """The name, among ``names``, of the layer deepest in the network."""
    return max(names, key=layer_index)


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
