"""Gradient methods: one forward pass and one backward pass stopped at the target layer.

A gradient method is written as its *terms*: the weighted activations (N, C, *grid) whose sum over
channels is the map (``w_c A_c`` for channel weights, ``ReLU(G) A`` for LayerCAM...), from the
activations ``A`` and gradients ``G`` of shape (N, C, *grid): (h, w) of an image, (t, h, w) of a
clip or a volume, over which every formula here sums or averages. The map is that sum, or with
``eigen_smooth`` the terms' first principal component (pytorch-grad-cam's ``eigen_smooth``),
oriented like the sum. A :class:`Formula` holds the terms; its method's record in
:mod:`nstcam.cam.registry` is all the engine needs (the pass, CUDA graphs, target objects).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from nstcam.cam._graphed import gradient_pass
from nstcam.cam._request import Outputs, Request
from nstcam.cam.methods.combine import combine, first_component, grid_dims, weighted

__all__ = [
    "Formula",
    "elementwise_terms",
    "finer_score",
    "finercam_pass",
    "gradcam_pp_terms",
    "gradcam_pp_weights",
    "gradcam_terms",
    "gradient_method",
    "hirescam_terms",
    "layercam_terms",
    "xgradcam_terms",
]

_EPS = 1e-7
Terms = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


@dataclass(frozen=True)
class Formula:
    """A gradient method's map from (A, G).

    Attributes:
        terms: ``terms(A, G)`` -> the weighted activations (N, C, h, w).
        projected: ``"sum"`` or ``"extreme"``: the terms are always projected on their first
            principal component, with that sign rule (see :func:`first_component`); None: summed.
    """

    terms: Terms
    projected: str | None = None

    def map(self, a: torch.Tensor, g: torch.Tensor, eigen_smooth: bool = False) -> torch.Tensor:
        """The raw map (N, h, w), after its ReLU."""
        terms = self.terms(a, g)
        if self.projected is not None:
            return torch.relu(first_component(terms, self.projected))
        return torch.relu(combine(terms, eigen_smooth))

    def __call__(self, a: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
        return self.map(a, g)


def gradcam_terms(a: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
    """Selvaraju et al. 2017: weights are the spatial mean of the gradients."""
    return weighted(a, g.mean(dim=grid_dims(g)))


def gradcam_pp_weights(a: torch.Tensor, g: torch.Tensor, g2: torch.Tensor, g3: torch.Tensor) -> torch.Tensor:
    """Grad-CAM++'s channel weights from the first, second and third powers of the gradients (the
    powers are averages over noisy inputs in Smooth Grad-CAM++): ``alpha = g2 / (2 g2 + sum_ab(A)
    g3)``, 0 where the denominator is, and weights ``sum_ij alpha_ij ReLU(g_ij)``, as the paper
    writes them. No eps is added: pytorch-grad-cam's (1e-6) outweighs the squared gradients of a
    transformer's LayerNorm'd layer (a median of about 1e-7 on random weights) and changes the map
    (``tests/test_cam_parity.py`` shows it)."""
    denom = 2 * g2 + a.sum(dim=grid_dims(a), keepdim=True) * g3
    ok = denom != 0
    alpha = torch.where(ok, g2 / torch.where(ok, denom, torch.ones_like(denom)), 0 * g2)
    return (alpha * torch.relu(g)).sum(dim=grid_dims(g))


def gradcam_pp_terms(a: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
    """Chattopadhyay et al. 2018, with the exponential-score closed form of the higher derivatives
    (``g^2`` and ``g^3`` for the second and third)."""
    return weighted(a, gradcam_pp_weights(a, g, g.pow(2), g.pow(3)))


def xgradcam_terms(a: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
    """Fu et al. 2020: weights ``sum_ij(A_ij g_ij) / (sum_ij A_ij)``."""
    return weighted(a, (a * g).sum(dim=grid_dims(a)) / (a.sum(dim=grid_dims(a)) + _EPS))


def layercam_terms(a: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
    """Jiang et al. 2021: ``ReLU(g) * A``, element-wise weights."""
    return torch.relu(g) * a


def hirescam_terms(a: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
    """Draelos & Carin 2020: ``g * A``, element-wise gradients, no averaging."""
    return g * a


def elementwise_terms(a: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
    """Grad-CAM element-wise (pytorch-grad-cam): ``ReLU(g * A)`` before the channel sum."""
    return torch.relu(g * a)


def abs_gradient_terms(a: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
    """Seg-Eigen-CAM (Chung & Ying 2025): ``|g| * A``, projected with its own sign rule."""
    return g.abs() * a


def gradient_method(formula: Formula) -> Callable[[Request], Outputs]:
    """The class pass of a gradient method: :func:`nstcam.cam._graphed.gradient_pass`."""

    def run(req: Request) -> Outputs:
        return gradient_pass(
            req.model, req.layer, formula, req.x, req.classes, req.layout, eigen_smooth=req.eigen_smooth
        )

    return run


def finer_score(
    alpha: float = 1.0, compared: int = 3
) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    """Finer-CAM's score (Zhang et al. 2025, pytorch-grad-cam's ``FinerWeightedTarget``): the target's
    logit against its ``compared`` most similar classes (nearest logits), each weighted by its
    probability: ``sum_i p_i (y_t - alpha y_i) / (sum_i p_i + 1e-9)`` (a model with fewer other
    classes compares them all)."""

    def score(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        y_t = logits.gather(1, target.view(-1, 1))
        dist = (logits - y_t).abs().scatter(1, target.view(-1, 1), -1.0)  # the target itself first
        k = min(compared, logits.shape[1] - 1)
        near = dist.detach().topk(k + 1, dim=1, largest=False).indices[:, 1:]
        p = logits.softmax(1).gather(1, near)
        return (p * (y_t - alpha * logits.gather(1, near))).sum(1) / (p.sum(1) + 1e-9)

    return score


GRADCAM = Formula(gradcam_terms)
"""Grad-CAM's formula (Finer-CAM and guided Grad-CAM read it too)."""


def finercam_pass(req: Request) -> Outputs:
    """Finer-CAM: Grad-CAM of :func:`finer_score` (one forward, one backward to the layer)."""
    score = finer_score()
    return gradient_pass(
        req.model,
        req.layer,
        GRADCAM,
        req.x,
        req.classes,
        req.layout,
        eigen_smooth=req.eigen_smooth,
        score=score,
    )
