"""Gradient-free methods: one forward pass to the layer, no gradient. Each is a map of the
activation (N, C, *grid) alone (:data:`ActivationMap`), except CAM, which reads the classifier's
linear weights."""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from nstcam._lapack import eigh
from nstcam.cam._maps import hooked_pass, read_nchw
from nstcam.cam._request import Outputs, Request
from nstcam.cam.methods.combine import cam_from_weights, first_component, grid_dims

__all__ = [
    "ActivationMap",
    "activation_pass",
    "cam_pass",
    "check_cam",
    "eigencam",
    "eigencam_map",
    "fem_map",
    "fem_weights",
    "kernel_pca",
    "kpca_map",
    "linear_head",
    "randomcam_map",
    "random_weights",
]

ActivationMap = Callable[[torch.Tensor, bool, torch.Generator], torch.Tensor]
"""``f(A, eigen_smooth, generator)`` -> a raw map (N, *grid) after ReLU, from the activation alone."""


def eigencam(a: torch.Tensor) -> torch.Tensor:
    """Muhammad & Yeasin 2020, gradient-free: the activations' first principal component, oriented
    to correlate positively with the summed activations (SVD's sign is arbitrary, and would otherwise
    flip maps between libraries and devices). The same map serves every class."""
    return first_component(a)


def fem_weights(a: torch.Tensor, k: float = 2.0) -> torch.Tensor:
    """Feature Explanation Method (Fuad et al. 2020), gradient-free: channel c's weight (N, C) is the
    share of its positions above ``mean_c + k std_c`` (population std); the map is ``sum_c w_c A_c``."""
    dims = grid_dims(a)
    mean = a.mean(dim=dims, keepdim=True)
    std = a.std(dim=dims, keepdim=True, unbiased=False)
    return (a > mean + k * std).to(a.dtype).mean(dim=dims)


def kernel_pca(a: torch.Tensor, gamma: float | None = None, coef0: float = 1.0) -> torch.Tensor:
    """KPCA-CAM (Karmani et al. 2024), gradient-free: each image's (h*w, C) activations, centred over
    positions, projected on the first kernel principal component of a sigmoid kernel
    ``tanh(gamma <x, y> + coef0)`` (``gamma`` 1/C by default, as scikit-learn's ``KernelPCA``), in
    float64 on the device. Sign as scikit-learn's: the eigenvector's largest entry is positive."""
    n, c, grid = a.shape[0], a.shape[1], a.shape[2:]
    flat = a.reshape(n, c, -1).transpose(1, 2).double()
    flat = torch.nan_to_num(flat) - torch.nan_to_num(flat).mean(dim=1, keepdim=True)
    kernel = torch.tanh((gamma if gamma is not None else 1.0 / c) * flat @ flat.transpose(1, 2) + coef0)
    m = kernel.shape[1]
    ones = torch.full((m, m), 1.0 / m, dtype=kernel.dtype, device=kernel.device)
    centred = kernel - ones @ kernel - kernel @ ones + ones @ kernel @ ones
    values, vectors = eigh(centred)  # ascending; one MKL thread (nstcam/_lapack.py)
    v, lam = vectors[:, :, -1], values[:, -1].clamp(min=0)
    big = v.gather(1, v.abs().argmax(dim=1, keepdim=True))
    v = v * torch.where(big < 0, -torch.ones_like(big), torch.ones_like(big))
    return (v * lam.sqrt()[:, None]).to(a.dtype).reshape(n, *grid)


def random_weights(n: int, c: int, generator: torch.Generator, device: torch.device) -> torch.Tensor:
    """RandomCAM's channel weights: uniform in [-1, 1), from a seeded generator (a baseline)."""
    return torch.rand(n, c, generator=generator, device=device) * 2 - 1


def eigencam_map(a: torch.Tensor, eigen_smooth: bool, gen: torch.Generator) -> torch.Tensor:
    """EigenCAM's map (``eigen_smooth`` changes nothing: it is already a principal component)."""
    return torch.relu(eigencam(a))


def kpca_map(a: torch.Tensor, eigen_smooth: bool, gen: torch.Generator) -> torch.Tensor:
    """KPCA-CAM's map (``eigen_smooth`` changes nothing: it is already a principal component)."""
    return torch.relu(kernel_pca(a))


def fem_map(a: torch.Tensor, eigen_smooth: bool, gen: torch.Generator) -> torch.Tensor:
    """FEM's map: ``ReLU(sum_c w_c A_c)`` with :func:`fem_weights`."""
    return cam_from_weights(a, fem_weights(a), eigen_smooth)


def randomcam_map(a: torch.Tensor, eigen_smooth: bool, gen: torch.Generator) -> torch.Tensor:
    """RandomCAM's map: :func:`random_weights` drawn from ``gen``."""
    return cam_from_weights(a, random_weights(*a.shape[:2], gen, a.device), eigen_smooth)


def activation_pass(fn: ActivationMap, per_class: bool) -> Callable[[Request], Outputs]:
    """The class pass of a map of the activation alone: one forward pass to the logits, no gradient.
    ``per_class``: a map drawn anew for each class explained (RandomCAM), else one map serves every
    class (EigenCAM, FEM, KPCA-CAM)."""

    def run(req: Request) -> Outputs:
        _, native, classes, probs = hooked_pass(req.model, req.layer, req.x, req.classes)
        a = read_nchw(native.float(), req.layout, req.x)
        k, gen = classes.shape[0], req.generator()
        if not per_class:
            raw = fn(a, req.eigen_smooth, gen)
            return raw.expand(k, *raw.shape), probs, classes
        return torch.stack([fn(a, req.eigen_smooth, gen) for _ in range(k)]), probs, classes

    return run


def linear_head(model: nn.Module, a: torch.Tensor, logits: torch.Tensor) -> torch.Tensor:
    """The weights (classes, C) of ``model``'s pooled linear head for the activation ``a`` (N, C, h,
    w): the last ``nn.Linear`` taking C features, checked on this pass (its output on the spatial
    mean of ``a`` must be the logits), since CAM is only defined where the layer feeds a global
    average pooling and one linear layer.

    Raises:
        ValueError: no such head, with the reason and the method to use instead.
    """
    c = a.shape[1]
    heads = [m for m in model.modules() if isinstance(m, nn.Linear) and m.in_features == c]
    why = f"no nn.Linear of the model takes the layer's {c} channels"
    if heads:
        head = heads[-1]
        pooled = F.linear(
            a.mean(dim=grid_dims(a)), head.weight.float(), None if head.bias is None else head.bias.float()
        )
        if pooled.shape == logits.shape and torch.allclose(pooled, logits.float(), rtol=1e-3, atol=1e-3):
            return head.weight.detach().float()
        why = "the logits are not a linear layer of the layer's spatial mean (more layers stand between)"
    raise ValueError(
        f"method 'cam' needs a target layer that feeds a global average pooling and one linear "
        f"classifier (CAM's weights are that layer's): {why}. Use method='gradcam' (the same map where "
        f"that holds) or the layer before the pooling (ResNet: 'layer4')"
    )


def cam_pass(req: Request) -> Outputs:
    """CAM (Zhou et al. 2016): the classifier's linear weights of each class explained."""
    logits, native, classes, probs = hooked_pass(req.model, req.layer, req.x, req.classes)
    a = read_nchw(native.float(), req.layout, req.x)
    head = linear_head(req.model, a, logits)
    maps = [cam_from_weights(a, head[classes[j]], req.eigen_smooth) for j in range(classes.shape[0])]
    return torch.stack(maps), probs, classes


def check_cam(model: nn.Module, layers: object, method: str) -> None:
    """Refuses a model without a linear layer, before any work."""
    if not any(isinstance(m, nn.Linear) for m in model.modules()):
        raise ValueError(
            f"method 'cam' uses the classifier's linear weights, and a {type(model).__name__} has no "
            "nn.Linear: use method='gradcam'"
        )
