"""Each style layer's weight in the network's own scale: a balance measured once per network.

A style layer's term is relative to its target (``||G - G_style||^2 / ||G_style||^2``), yet how far a
photo starts from a painting at a layer depends on the network: on seeded random VGG16_bn the
content-to-style distances fall with depth (1.73 at relu1_1 to 0.19 at relu5_1 for the cat and
gravel), on the real ImageNet VGG16 they rise to 62.7 at relu5_1, which then holds 94 % of the style
loss and washes the subject out (``tests/benchmarks/bench_style_real.py --split``). The balance
divides each layer's weight by that layer's distance between a reference pair (the bundled
``chelsea.png`` and ``brick.png``, 128 px), so that every layer starts near 1 on any VGG, and the
style term near 1 in all: one set of weights serves random and real, BatchNorm or caffe networks.

Each style loss has its own balance, the reference pair's distance in its own terms (its target and
its term, one layer at a time): a balance measured on Gram magnitudes re-weighted the distribution
losses' layers by another loss's scale, and they ended farther from the style than the Gram loss by
their own measures (issue 64; ``tests/test_style_distribution.py``). The Gram loss's is the relative
Gram distance, as before.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from nstcam.image import SAMPLES, ImageSource, image_to_tensor, load_image, resize_long_side
from nstcam.style.hooks import VGGFeatureHooks
from nstcam.style.losses import style_loss_named
from nstcam.style.losses.base import StyleLoss
from nstcam.style.losses.gram import gram
from nstcam.style.losses.sliced import directions_for
from nstcam.style.losses.wasserstein import augmented

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


def layer_balance(rt, style_loss: str = "gram") -> dict[str, float]:
    """Each layer's weight factor for ``rt``'s network and ``style_loss``: 1 / that loss's own
    distance at the layer between the reference pair; measured once per runtime and loss
    (thread-safe) and kept."""
    with rt.lock:
        if style_loss in rt.balance:
            return dict(rt.balance[style_loss])
    loss = style_loss_named(style_loss)
    content, style, size = REFERENCE
    fc, fs = _layer_features(rt, SAMPLES / content, size), _layer_features(rt, SAMPLES / style, size)
    factors = {name: 1.0 / max(_distance(loss, fc[name], fs[name]), 1e-6) for name in fc}
    with rt.lock:
        rt.balance[style_loss] = factors
    return factors


def _layer_features(rt, image: ImageSource, size: int) -> dict[str, torch.Tensor]:
    x = image_to_tensor(resize_long_side(load_image(image), size), rt.device)
    with torch.no_grad(), VGGFeatureHooks(rt.net, list(rt.layers)) as hooks:
        return {name: f.float() for name, f in rt.features(hooks, x).items()}


def _distance(loss: StyleLoss, fc: torch.Tensor, fs: torch.Tensor) -> float:
    """``loss``'s term at one layer for features ``fc`` against the target it reads of ``fs``."""
    if loss.reads == "positions":
        read: Any = [(fs, 1.0)]
    else:
        read = gram(augmented(fs) if loss.augment else fs)
    directions = {"x": directions_for(fc.shape[1], 0, 0, fc.device)} if loss.random_directions else None
    with torch.no_grad():
        term = loss.term(
            {"x": fc}, {"x": loss.target(read, 0)}, {"x": 1.0}, lambda _n: None, directions, "eigh"
        )
    return float(term[0])


def balanced_weights(
    layers: Mapping[str, float], style_weight: float, balance: Mapping[str, float]
) -> tuple[dict[str, float], float]:
    """``layers``' weights times their balance, and ``style_weight`` rescaled so that the style term
    (a weighted mean over layers) is the balanced layers' sum over the given weights' sum: a
    layer as far from its target as the reference pair's counts its weight, on any network."""
    given = sum(layers.values())
    out = {name: w * balance[name] for name, w in layers.items()}
    return out, style_weight * sum(out.values()) / given
