"""Which models and layers Grad-CAM offers."""

from __future__ import annotations

from torch import nn

from nstcam.hooks import resolve_modules
from nstcam.weights import ARCHS

__all__ = ["CAM_ARCHS", "candidate_layers", "check_layer"]

CAM_ARCHS = tuple(a for a in ARCHS if a.startswith("resnet"))


def candidate_layers(model: nn.Module) -> list[str]:
    """Layers worth explaining: the top-level stages and their blocks (e.g. ``layer4``, ``layer4.2``)."""
    names = []
    for name, m in model.named_children():
        if isinstance(m, nn.Sequential) and len(m) and name.startswith("layer"):
            names.append(name)
            names.extend(f"{name}.{i}" for i in range(len(m)))
        elif isinstance(m, (nn.Conv2d, nn.BatchNorm2d, nn.ReLU, nn.MaxPool2d)):
            names.append(name)
    return names


def check_layer(model: nn.Module, layer: str) -> None:
    """Raises ``ValueError`` listing the closest valid names if ``layer`` is not in ``model``."""
    resolve_modules(model, [layer])
