"""The style engine's hook manager: a VGG's ReLU outputs by human name, forward stopped early."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from nstcam.hooks import HookManager
from nstcam.style.vgg import layer_index, vgg_layers

__all__ = ["VGGFeatureHooks"]


class VGGFeatureHooks(HookManager):
    """Records a VGG's ReLU outputs by human name and stops the forward at the deepest one.

    Like every :class:`~nstcam.hooks.HookManager`, it records only its own caller's passes, so one
    network serves any number of concurrent runs.

    Args:
        features: a VGG's ``features`` (``vgg16_bn().features``, VGG19's, a folded copy from
            :func:`~nstcam.style.vgg.fold_batchnorm`); its names are :func:`~nstcam.style.vgg.vgg_layers`.
        layers: human names such as ``"relu1_1"``.
    """

    def __init__(self, features: nn.Sequential, layers: Sequence[str]) -> None:
        self.names = list(dict.fromkeys(layers))
        table = vgg_layers(features)
        self._index = {n: str(layer_index(n, table)) for n in self.names}
        super().__init__(features, list(self._index.values()), early_stop=True)

    def features(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        """Runs ``x`` through the network up to the deepest layer; returns human name -> output."""
        rec = self.run(x)
        return {n: rec[i] for n, i in self._index.items()}
