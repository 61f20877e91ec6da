"""Each style layer's weight in the network's own scale: a balance measured once per network.

A style layer's term is relative to its target (``||G - G_style||^2 / ||G_style||^2``), yet how far a
photo starts from a painting at a layer depends on the network: on seeded random VGG16_bn the
content-to-style distances fall with depth (1.73 at relu1_1 to 0.19 at relu5_1 for the cat and
gravel), on the real ImageNet VGG16 they rise to 62.7 at relu5_1, which then holds 94 % of the style
loss and washes the subject out (``tests/benchmarks/bench_style_real.py --split``). The balance
divides each layer's weight by that layer's distance between a reference pair (the bundled
``chelsea.png`` and ``brick.png``, 128 px), so that every layer starts near 1 on any VGG, and the
style term near 1 in all: one set of weights serves random and real, BatchNorm or caffe networks.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

from nstcam.image import SAMPLES, ImageSource, image_to_tensor, load_image, resize_long_side
from nstcam.style.hooks import VGGFeatureHooks

__all__ = ["REFERENCE", "balanced_weights", "layer_balance", "layer_grams"]

REFERENCE = ("chelsea.png", "brick.png", 128)
"""The reference pair (content, style, long side in px) the balance is measured on."""


def layer_grams(rt, image: ImageSource, size: int) -> dict[str, torch.Tensor]:
    """Every layer's Gram matrix (C x C, over positions) of ``image`` at long side ``size``, through
    ``rt``'s network as it takes images."""
    x = image_to_tensor(resize_long_side(load_image(image), size), rt.device)
    with torch.no_grad(), VGGFeatureHooks(rt.net, list(rt.layers)) as hooks:
        feats = rt.features(hooks, x)
    out = {}
    for name, f in feats.items():
        f = f[0].float().flatten(1)
        out[name] = f @ f.T / f.shape[1]
    return out


def layer_balance(rt) -> dict[str, float]:
    """Each layer's weight factor for ``rt``'s network: 1 / its relative Gram distance between the
    reference pair; measured once per runtime (thread-safe) and kept."""
    with rt.lock:
        if rt.balance:
            return dict(rt.balance)
    content, style, size = REFERENCE
    gc, gs = layer_grams(rt, SAMPLES / content, size), layer_grams(rt, SAMPLES / style, size)
    factors = {}
    for name in gc:
        d = float((gc[name] - gs[name]).pow(2).sum() / gs[name].pow(2).sum().clamp_min(1e-12))
        factors[name] = 1.0 / max(d, 1e-6)
    with rt.lock:
        rt.balance.update(factors)
    return factors


def balanced_weights(
    layers: Mapping[str, float], style_weight: float, balance: Mapping[str, float]
) -> tuple[dict[str, float], float]:
    """``layers``' weights times their balance, and ``style_weight`` rescaled so that the style term
    (a weighted mean over layers) is the balanced layers' sum over the given weights' sum: a
    layer as far from its target as the reference pair's counts its weight, on any network."""
    given = sum(layers.values())
    out = {name: w * balance[name] for name, w in layers.items()}
    return out, style_weight * sum(out.values()) / given
