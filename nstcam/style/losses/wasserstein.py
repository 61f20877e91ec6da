"""Gaussian Wasserstein-2 (as crowsonkb/style-transfer-pytorch): each layer's features are taken as a
Gaussian of mean ``mu`` and covariance ``S``; the squared distance to the style's is
``||mu - mu_s||^2 + tr(S + S_s - 2 (S_s^1/2 S S_s^1/2)^1/2)``. The style's ``S_s^1/2`` is computed
once per style and size; the output's term needs the trace of a matrix square root each step, the
sum of the square roots of the eigenvalues of ``S_s^1/2 S S_s^1/2`` (``"eigh"``, exact, whose
gradient ``V diag(1 / 2 sqrt(l)) V^T`` needs no eigenvalue gaps) or Newton-Schulz iterations
(``"newton-schulz"``: matrix products only, for compilers and GPUs).

``tests/benchmarks/bench_style_losses.py`` times it against the Gram loss.
"""

from __future__ import annotations

from typing import Any

import torch

from nstcam._choices import one_of
from nstcam._lapack import eigh
from nstcam.style._selfcheck import Tolerance
from nstcam.style._trace_sqrt import trace_sqrt
from nstcam.style.losses.base import Feats, MaskFn, StyleLoss, Weights, wide

__all__ = [
    "LOSS",
    "RIDGE",
    "SQRTS",
    "augmented",
    "feature_stats",
    "gaussian_w2",
    "psd_sqrt",
    "w2_style_loss",
    "w2_target",
]

SQRTS = ("eigh", "newton-schulz")


def feature_stats(f: torch.Tensor, mask: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(mean (N, C), covariance (N, C, C)) of features (N, C, H, W) over positions, in float32 (or
    float64 for float64 features);
    ``mask`` (N, 1, H, W) weighs the positions."""
    n, c, h, w = f.shape
    x = wide(f).reshape(n, c, h * w)
    if mask is None:
        mu = x.mean(-1)
        d = x - mu[..., None]
        return mu, d @ d.transpose(1, 2) / (h * w)
    m = mask.to(x.dtype).reshape(n, 1, h * w)
    total = m.sum(-1).clamp_min(1e-8)  # (N, 1)
    mu = (x * m).sum(-1) / total
    d = x - mu[..., None]
    return mu, (d * m) @ d.transpose(1, 2) / total[..., None]


def psd_sqrt(a: torch.Tensor, method: str = "eigh", iters: int = 20) -> torch.Tensor:
    """The symmetric square root of positive semi-definite ``a`` (..., C, C).

    Args:
        a: the matrices.
        method: ``"eigh"`` (an eigendecomposition, negative rounding clamped to 0) or
            ``"newton-schulz"`` (coupled iterations on ``a`` scaled by its Frobenius norm).
        iters: Newton-Schulz iterations.
    """
    if method == "eigh":
        vals, vecs = eigh(a)  # as fast from any thread (nstcam/_lapack.py)
        return (vecs * vals.clamp_min(0).sqrt()[..., None, :]) @ vecs.transpose(-1, -2)
    one_of("method", method, SQRTS)
    norm = torch.linalg.matrix_norm(a).clamp_min(1e-12)[..., None, None]
    eye = torch.eye(a.shape[-1], dtype=a.dtype, device=a.device).expand_as(a)
    y, z = a / norm, eye
    for _ in range(iters):
        t = 0.5 * (3 * eye - z @ y)
        y, z = y @ t, t @ z
    return y * norm.sqrt()


def _trace_sqrt(m: torch.Tensor, method: str) -> torch.Tensor:
    """tr(m^1/2) of symmetric PSD ``m`` (N, C, C)."""
    if method == "eigh":
        return trace_sqrt(m)  # as fast from any thread (_trace_sqrt.py)
    return psd_sqrt(m, method).diagonal(dim1=-2, dim2=-1).sum(-1)


def gaussian_w2(
    mu: torch.Tensor,
    cov: torch.Tensor,
    mu_t: torch.Tensor,
    cov_t: torch.Tensor,
    sqrt_t: torch.Tensor | None = None,
    *,
    method: str = "eigh",
) -> torch.Tensor:
    """Squared Wasserstein-2 distance between Gaussians, one per image: (N,).

    Args:
        mu: means (N, C); cov: covariances (N, C, C) (the output's, differentiated).
        mu_t: the target's means (1 or N, C); cov_t: covariances (1 or N, C, C).
        sqrt_t: ``psd_sqrt(cov_t)`` when already known (computed once per style and size).
        method: how the trace of the square root is taken (see :func:`psd_sqrt`).
    """
    one_of("method", method, SQRTS)
    root = psd_sqrt(cov_t) if sqrt_t is None else sqrt_t
    middle = root @ cov @ root
    middle = 0.5 * (middle + middle.transpose(-1, -2))  # symmetric to rounding, as eigvalsh assumes
    traces = cov.diagonal(dim1=-2, dim2=-1).sum(-1) + cov_t.diagonal(dim1=-2, dim2=-1).sum(-1)
    return (mu - mu_t).pow(2).sum(-1) + traces - 2 * _trace_sqrt(middle, method)


def augmented(f: torch.Tensor) -> torch.Tensor:
    """Features (N, C, H, W) with a constant channel of ones appended: their Gram matrix holds the
    second moments, the means (last column) and 1, so Gram machinery (masks, tiles, blends of
    several styles: a mixture's moments) gives the statistics :func:`w2_target` needs."""
    return torch.cat([f, torch.ones_like(f[:, :1])], dim=1)


RIDGE = 1e-4
"""Both covariances get ``RIDGE`` times the style's mean variance on their diagonal: a deep layer
of a small image has fewer positions than channels, so its covariance is singular, and the
square root's gradient ``1 / 2 sqrt(l)`` at a zero eigenvalue would be noise times a huge factor.
The distance of equal Gaussians stays 0."""


def w2_target(g: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """(mean (B, C), covariance (B, C, C) with the ridge, its square root, the second moment's trace
    (B,), the ridge (B,)) from the Gram matrices (B, C + 1, C + 1) of :func:`augmented` features."""
    g = g.float()
    mu = g[:, :-1, -1]
    second = g[:, :-1, :-1]
    cov = second - mu[:, :, None] * mu[:, None, :]
    cov = 0.5 * (cov + cov.transpose(1, 2))
    ridge = RIDGE * cov.diagonal(dim1=1, dim2=2).mean(-1).clamp_min(1e-12)
    cov = cov + ridge[:, None, None] * torch.eye(cov.shape[-1], device=cov.device)
    return mu, cov, psd_sqrt(cov), second.diagonal(dim1=1, dim2=2).sum(-1), ridge


def w2_style_loss(
    stats: dict[str, tuple[torch.Tensor, torch.Tensor]],
    targets: dict[str, tuple[torch.Tensor, ...]],
    weights: dict[str, float],
    method: str = "eigh",
) -> torch.Tensor:
    """Weighted mean over layers of each image's squared W2 distance to the style's Gaussian,
    divided by the style's mean squared feature norm (relative, as the Gram loss is): (N,).
    ``method``: the square root's (:func:`psd_sqrt`; the compiled CUDA step takes Newton-Schulz,
    which never waits for the host as eigh's error check does, so CUDA graphs can capture it)."""
    total = sum(weights.values())
    loss = 0.0
    for name, w in weights.items():
        mu_t, cov_t, root, scale, ridge = targets[name]
        mu, cov = stats[name]
        cov = cov + ridge[:, None, None] * torch.eye(cov.shape[-1], device=cov.device, dtype=cov.dtype)
        d = gaussian_w2(mu, cov, mu_t, cov_t, root, method=method)
        loss = loss + w * d / scale.clamp_min(1e-8)
    return loss / total


def w2_term(
    feats: Feats, targets: Feats, weights: Weights, mask: MaskFn, directions: Any = None, sqrt: str = "eigh"
) -> torch.Tensor:
    """Each image's W2 loss (N,), positions weighed by ``mask(name)``, square roots by ``sqrt``."""
    stats = {n: feature_stats(feats[n], mask(n)) for n in weights}
    return w2_style_loss(stats, targets, weights, sqrt)


LOSS = StyleLoss(
    "wasserstein",
    "each layer's features matched as a Gaussian: mean and covariance",
    "grams",
    lambda g, seed: w2_target(g),
    w2_term,
    augment=True,
    # The distance is a difference of traces that nearly cancel: float32 against float64 on the same
    # network, terms differ by up to 1.1e-2 relative and the image gradient by 2.0e-2 relative L2
    # (32-128 px, tests/benchmarks/bench_selfcheck.py); the compiled step against eager, by 1.9e-4
    # and 1.7e-2. A 1 % error in the style term is still caught (2e-3).
    check=Tolerance(terms=2e-3, grad=1e-1, cosine=0.999),
)
