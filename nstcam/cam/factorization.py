"""Deep feature factorization (Collins et al. 2018): a layer's activations over one or more images,
factorised by non-negative matrix factorisation into ``k`` concepts, each a channel embedding and a
map per image; each concept is labelled by the classifier's head where the model has one.

Example:
    >>> cam = GradCAM("resnet50", weights="imagenet")
    >>> found = concepts(cam, ["cat.jpg", "dog.jpg"], k=4)
    >>> found.labels[0]  # [("tabby", 0.41), ("tiger cat", 0.22)]
    >>> found.maps.shape  # (2 images, 4 concepts, H, W)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from nstcam._checks import whole
from nstcam.cam._maps import hooked_pass, normalize_maps, read_nchw
from nstcam.cam.hooks import eval_view
from nstcam.image import ImageSource, load_image

__all__ = ["Concepts", "concepts", "nmf"]


@dataclass
class Concepts:
    """What :func:`concepts` found.

    Attributes:
        embeddings: (k, C) each concept's channel embedding (the NMF basis, offset added back).
        maps: (N, k, H, W) each concept's map on each image, in [0, 1] at the image's size (images
            of different sizes: a list of (k, H_i, W_i) arrays).
        labels: per concept, the head's top classes as (label, probability); empty lists where the
            model has no linear head on this layer's channels.
        error: the factorisation's relative error ``||V - WH|| / ||V||``.
        random_weights: the model has seeded random weights: concepts and labels mean nothing.
    """

    embeddings: np.ndarray
    maps: np.ndarray | list[np.ndarray]
    labels: list[list[tuple[str, float]]]
    error: float
    random_weights: bool = False


def nmf(v: torch.Tensor, k: int, iterations: int = 300, seed: int = 0, tol: float = 1e-5):
    """Non-negative ``v`` (C, M) ~= ``w`` (C, k) @ ``h`` (k, M) by Lee & Seung's multiplicative
    updates (Frobenius loss) in float64, from scikit-learn's ``init="random"`` scale
    (``sqrt(mean(v) / k)``) drawn from a generator seeded per call. Returns (w, h, relative error)."""
    v = v.double()
    gen = torch.Generator(device=v.device).manual_seed(seed)
    scale = (v.mean() / k).sqrt()
    w = scale * torch.rand(v.shape[0], k, generator=gen, device=v.device, dtype=v.dtype)
    h = scale * torch.rand(k, v.shape[1], generator=gen, device=v.device, dtype=v.dtype)
    eps = torch.finfo(v.dtype).eps
    norm = v.norm().clamp(min=eps)
    last = None
    for i in range(iterations):
        h = h * (w.T @ v) / (w.T @ w @ h + eps)
        w = w * (v @ h.T) / (w @ (h @ h.T) + eps)
        if i % 10 == 9:
            err = float((v - w @ h).norm() / norm)
            if last is not None and last - err < tol * last:
                break
            last = err
    return w, h, float((v - w @ h).norm() / norm)


def concepts(
    engine,
    images: ImageSource | Sequence[ImageSource],
    k: int = 5,
    *,
    top: int = 2,
    iterations: int = 300,
    seed: int = 0,
) -> Concepts:
    """Factorises ``engine``'s target layer (its first, if several) over ``images`` into ``k`` concepts.

    Args:
        engine: a :class:`nstcam.GradCAM` (its model, layer, layout and preprocessing are used).
        images: one image or several (anything :func:`nstcam.load_image` takes).
        k: concepts to find.
        top: classes named per concept.
        iterations: most NMF updates (it stops earlier once the error stops falling).
        seed: the NMF's initialisation.

    Raises:
        ValueError: ``k`` below 1 or above the layer's channels or positions.
    """
    k = whole("k", k, minimum=1, maximum=64)
    imgs = [load_image(i) for i in (images if isinstance(images, (list, tuple)) else [images])]
    model = eval_view(engine.model)
    layer, layout = engine.target_layers[0], engine.layouts[0]
    acts = []
    for img in imgs:
        x = engine.preprocess(img)
        _, native, _, _ = hooked_pass(model, layer, x, lambda logits: logits.topk(1, dim=1).indices.T)
        acts.append(read_nchw(native.float(), layout, x)[0])  # (C, h, w)
    c = acts[0].shape[0]
    if k > min(c, sum(a.shape[1] * a.shape[2] for a in acts)):
        raise ValueError(f"k must be at most the layer's {c} channels and its positions; got {k}")
    v = torch.cat([torch.nan_to_num(a).reshape(c, -1) for a in acts], dim=1)  # (C, sum of h*w)
    offset = v.amin(dim=1, keepdim=True)
    w, h, error = nmf(v - offset, k, iterations, seed)
    embeddings = (w + offset.double()).T.float()  # (k, C)
    maps, start = [], 0
    for img, a in zip(imgs, acts, strict=True):
        n = a.shape[1] * a.shape[2]
        part = h[:, start : start + n].reshape(k, a.shape[1], a.shape[2]).float()
        start += n
        up = F.interpolate(
            normalize_maps(part).unsqueeze(1),
            size=(img.height, img.width),
            mode="bilinear",
            align_corners=False,
        )[:, 0]
        maps.append(normalize_maps(up).cpu().numpy())
    same = len({m.shape for m in maps}) == 1
    return Concepts(
        embeddings=embeddings.cpu().numpy(),
        maps=np.stack(maps) if same else maps,
        labels=_labels(engine, model, embeddings, top),
        error=error,
        random_weights=bool(engine.weights and engine.weights.is_random),
    )


def _labels(engine, model: nn.Module, embeddings: torch.Tensor, top: int) -> list[list[tuple[str, float]]]:
    """Each concept through the model's last linear layer that takes its channels, softmaxed."""
    heads = [m for m in model.modules() if isinstance(m, nn.Linear) and m.in_features == embeddings.shape[1]]
    if not heads:
        return [[] for _ in range(embeddings.shape[0])]
    head = heads[-1]
    with torch.no_grad():
        probs = head(embeddings.to(head.weight.dtype)).float().softmax(1)
    top = min(top, probs.shape[1])
    values, indices = probs.topk(top, dim=1)
    return [
        [(engine.label(int(i)), float(p)) for p, i in zip(vs, ids, strict=True)]
        for vs, ids in zip(values, indices, strict=True)
    ]
