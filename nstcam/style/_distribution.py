"""Style losses that match feature distributions, not only their Gram matrices
(:meth:`nstcam.StyleTransfer.stylize`'s ``style_loss="wasserstein"`` and ``"sliced"``).

- **Gaussian Wasserstein-2** (as crowsonkb/style-transfer-pytorch): each layer's features are taken
  as a Gaussian of mean ``mu`` and covariance ``S``; the squared distance to the style's is
  ``||mu - mu_s||^2 + tr(S + S_s - 2 (S_s^1/2 S S_s^1/2)^1/2)``. The style's ``S_s^1/2`` is computed
  once per style and size; the output's term needs the trace of a matrix square root each step,
  the sum of the square roots of the eigenvalues of ``S_s^1/2 S S_s^1/2`` (``"eigh"``, exact, whose
  gradient ``V diag(1 / 2 sqrt(l)) V^T`` needs no eigenvalue gaps) or Newton-Schulz iterations
  (``"newton-schulz"``: matrix products only, for compilers and GPUs).
- **Sliced Wasserstein-2** (Heitz et al., CVPR 2021): features projected on unit directions, each
  projection's values sorted and compared with the style's at the same quantiles (sizes may
  differ: the style's sorted values are interpolated, never repeated).

``tests/benchmarks/bench_style_losses.py`` times each against the Gram loss.
"""

from __future__ import annotations

import torch

from nstcam._lapack import eigh
from nstcam.style._trace_sqrt import trace_sqrt

__all__ = [
    "STYLE_LOSSES",
    "augmented",
    "feature_stats",
    "gaussian_w2",
    "psd_sqrt",
    "random_directions",
    "sliced_w2",
    "RIDGE",
    "sliced_style_loss",
    "sliced_target",
    "sorted_projections",
    "w2_style_loss",
    "w2_target",
]

STYLE_LOSSES = ("gram", "wasserstein", "sliced")
"""The style losses :meth:`nstcam.StyleTransfer.stylize` takes (``style_loss=``)."""

SQRTS = ("eigh", "newton-schulz")


def _wide(t: torch.Tensor) -> torch.Tensor:
    """``t`` in float32 at least (half and bfloat16 widened, float64 kept)."""
    return t.to(torch.promote_types(t.dtype, torch.float32))


def feature_stats(f: torch.Tensor, mask: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(mean (N, C), covariance (N, C, C)) of features (N, C, H, W) over positions, in float32 (or
    float64 for float64 features);
    ``mask`` (N, 1, H, W) weighs the positions."""
    n, c, h, w = f.shape
    x = _wide(f).reshape(n, c, h * w)
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
    if method != "newton-schulz":
        raise ValueError(f"method must be one of {', '.join(SQRTS)}, got {method!r}")
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
    if method not in SQRTS:
        raise ValueError(f"method must be one of {', '.join(SQRTS)}, got {method!r}")
    root = psd_sqrt(cov_t) if sqrt_t is None else sqrt_t
    middle = root @ cov @ root
    middle = 0.5 * (middle + middle.transpose(-1, -2))  # symmetric to rounding, as eigvalsh assumes
    traces = cov.diagonal(dim1=-2, dim2=-1).sum(-1) + cov_t.diagonal(dim1=-2, dim2=-1).sum(-1)
    return (mu - mu_t).pow(2).sum(-1) + traces - 2 * _trace_sqrt(middle, method)


def random_directions(
    c: int, k: int, generator: torch.Generator, device: torch.device | str = "cpu"
) -> torch.Tensor:
    """(C, K) unit directions, uniform on the sphere, from ``generator`` (a run's seed and step)."""
    d = torch.randn(c, k, generator=generator).to(device)
    return d / d.norm(dim=0, keepdim=True)


def sorted_projections(f: torch.Tensor, directions: torch.Tensor) -> torch.Tensor:
    """Features (N, C, H, W) projected on ``directions`` (C, K), sorted over positions: (N, K, H*W)."""
    n, c = f.shape[:2]
    return (directions.T.to(f.dtype) @ f.reshape(n, c, -1)).sort(dim=-1).values


def sliced_w2(f: torch.Tensor, target_sorted: torch.Tensor, directions: torch.Tensor) -> torch.Tensor:
    """Sliced squared Wasserstein-2 distance of features (N, C, H, W) to a target's sorted
    projections (1 or N, K, M_t) on the same ``directions`` (C, K): the mean over directions and
    quantiles of the squared difference of sorted values, (N,)."""
    mine = sorted_projections(_wide(f), _wide(directions))
    theirs = _wide(target_sorted)
    if theirs.shape[-1] != mine.shape[-1]:  # read at the output's levels (i + 0.5) / m
        m, mt = mine.shape[-1], theirs.shape[-1]
        levels = ((torch.arange(m, device=mine.device, dtype=mine.dtype) + 0.5) / m).expand(
            *mine.shape[:2], m
        )
        theirs = _weighted_quantiles(
            theirs, torch.full(theirs.shape[::2], 1 / mt, dtype=theirs.dtype, device=theirs.device), levels
        )
    return (mine - theirs).pow(2).mean(dim=(1, 2))


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


MAX_SAMPLES = 16384
"""Positions of a style's layer kept for the sliced loss (drawn once, seeded): its quantile
functions are read from them, and each step projects and sorts them."""


def directions_for(c: int, seed: int, draw: int, device: torch.device | str) -> torch.Tensor:
    """The sliced loss' (C, K) directions of evaluation ``draw`` of a run seeded ``seed``: fresh at
    each evaluation, the same in every rerun; K = max(8, C // 4) (the measured cost, README)."""
    gen = torch.Generator().manual_seed((seed * 1_000_003 + draw * 7919 + c) % (2**63 - 1))
    return random_directions(c, max(8, c // 4), gen, device)


def sliced_target(parts: list[tuple[torch.Tensor, float]], seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(positions (1, C, M), their weights (1, M), summing to 1) of a blend of styles' features
    ``(f (1, C, H, W), blend weight)``: each style's positions (at most :data:`MAX_SAMPLES`, drawn
    from ``seed``) weighted by its blend weight, so the target is the mixture's distribution."""
    feats, weights = [], []
    gen = torch.Generator().manual_seed(seed)
    for f, w in parts:
        x = _wide(f)[0].flatten(1)
        if x.shape[1] > MAX_SAMPLES:
            x = x[:, torch.randperm(x.shape[1], generator=gen)[:MAX_SAMPLES].to(x.device)]
        feats.append(x)
        weights.append(torch.full((x.shape[1],), w / x.shape[1], device=x.device))
    w = torch.cat(weights)
    return torch.cat(feats, dim=1)[None], (w / w.sum())[None]


def _weighted_quantiles(values: torch.Tensor, weights: torch.Tensor, levels: torch.Tensor) -> torch.Tensor:
    """The quantile function of ``values`` (B, K, M) with position ``weights`` (B, M), read at
    ``levels`` (N, K, Q) in (0, 1) by linear interpolation between the weights' midpoints."""
    v, order = values.sort(dim=-1)
    w = weights[:, None, :].expand_as(values).gather(-1, order)
    mid = w.cumsum(-1) - w / 2  # (B, K, M): each sorted value's level
    mid, v = mid.expand(levels.shape[0], -1, -1), v.expand(levels.shape[0], -1, -1)
    hi = torch.searchsorted(mid.contiguous(), levels.contiguous()).clamp(1, v.shape[-1] - 1)
    lo = hi - 1
    m_lo, m_hi = mid.gather(-1, lo), mid.gather(-1, hi)
    t = ((levels - m_lo) / (m_hi - m_lo).clamp_min(1e-12)).clamp(0, 1)
    return v.gather(-1, lo) * (1 - t) + v.gather(-1, hi) * t


def sliced_style_loss(
    feats: dict[str, torch.Tensor],
    targets: dict[str, tuple[torch.Tensor, torch.Tensor]],
    weights: dict[str, float],
    directions: dict[str, torch.Tensor],
    masks: dict[str, torch.Tensor | None] | None = None,
) -> torch.Tensor:
    """Weighted mean over layers of each image's sliced squared W2 distance (N,) to the style's
    positions, on each layer's ``directions`` (C, K), divided by the style's mean squared
    projection (relative, as the Gram loss is). ``masks[name]`` (N, 1, h, w) weighs the output's
    positions: each sorted value sits at its cumulative weight's level."""
    total = sum(weights.values())
    loss = 0.0
    for name, wl in weights.items():
        f, d = _wide(feats[name]), directions[name]
        values, pos_w = targets[name]
        n, c = f.shape[:2]
        mine = d.T.to(f.dtype) @ f.reshape(n, c, -1)  # (N, K, HW)
        theirs = d.T.to(values.dtype) @ values  # (B, K, M)
        mask = None if masks is None else masks.get(name)
        if mask is None:
            m = mine.sort(dim=-1).values
            q = m.shape[-1]
            levels = ((torch.arange(q, device=f.device, dtype=f.dtype) + 0.5) / q).expand(n, m.shape[1], q)
            per = (m - _weighted_quantiles(theirs, pos_w, levels)).pow(2).mean(dim=(1, 2))
        else:
            mw = mask.to(f.dtype).reshape(n, 1, -1).expand_as(mine)
            m, order = mine.sort(dim=-1)
            ws = mw.gather(-1, order)
            tot = ws.sum(-1, keepdim=True).clamp_min(1e-12)
            levels = (ws.cumsum(-1) - ws / 2) / tot
            per = ((m - _weighted_quantiles(theirs, pos_w, levels)).pow(2) * ws / tot).sum(-1).mean(-1)
        scale = (theirs.pow(2) * pos_w[:, None, :]).sum(-1).mean(-1).clamp_min(1e-8)  # (B,)
        loss = loss + wl * per / scale
    return loss / total
