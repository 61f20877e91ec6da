"""Noisy linear imputation (Rong et al. 2022, ROAD): each removed pixel becomes the weighted mean
of its eight neighbours (1/6 for the four direct ones, 1/12 for the diagonals), known pixels held
fixed, plus a little Gaussian noise, so the removed region carries no trace of its shape.

The linear system is solved on the device for a whole batch at once by conjugate gradients (the
operator restricted to the removed pixels is symmetric positive definite whenever some pixel is
known), with 3x3 convolutions as the matrix product. Large removed regions (a smooth saliency map
removes whole blobs) converge slowly from a flat start, so the solve is cascadic: the problem at
half resolution (a coarse pixel is known when any of its four is) is solved first and its
solution, upsampled, starts the fine one.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

__all__ = ["linear_impute", "noisy_linear_impute"]


def linear_impute(
    x: torch.Tensor,
    removed: torch.Tensor,
    *,
    tol: float = 1e-4,
    max_iter: int = 64,
    cascade: bool = True,
) -> torch.Tensor:
    """``x`` (B, C, H, W) with the pixels where ``removed`` (B, 1, H, W) is true replaced by the
    solution of the neighbour equations: conjugate gradients until the relative residual is below
    ``tol`` or for ``max_iter`` iterations per level (``cascade``: from the half-resolution
    solution when the image is at least 32 px)."""
    b_, c, h, w = x.shape
    start = None
    if cascade and min(h, w) >= 32:
        keep = (~removed).to(x.dtype)
        count = F.avg_pool2d(keep, 2, ceil_mode=True)
        coarse_x = F.avg_pool2d(x * keep, 2, ceil_mode=True) / count.clamp_min(1e-12)
        coarse = linear_impute(coarse_x, count == 0, tol=tol, max_iter=max_iter)
        start = F.interpolate(coarse, size=(h, w), mode="bilinear", align_corners=False)
    r_mask = removed.to(x.dtype).expand(b_, c, h, w)

    def neighbour_sum(v: torch.Tensor) -> torch.Tensor:
        """The eight neighbours weighted 1/6 and 1/12: ([1, 2, 1] down, then across, less 4 times the
        pixel) / 12, in shifted slices (a 1-channel conv is slow on CPU), six passes over the image
        where the eight neighbours one by one took eleven."""
        p = F.pad(v, (1, 1, 1, 1))
        rows = p[..., :-2, :] + p[..., 2:, :]
        rows.add_(p[..., 1:-1, :], alpha=2)
        out = rows[..., :-2] + rows[..., 2:]
        out.add_(rows[..., 1:-1], alpha=2).add_(v, alpha=-4)
        return out.mul_(1 / 12)

    degree = neighbour_sum(torch.ones(1, 1, h, w, device=x.device, dtype=x.dtype))
    known = x * (1 - r_mask)

    def apply(u: torch.Tensor) -> torch.Tensor:  # r_mask * (degree * u - neighbour_sum(u))
        return neighbour_sum(u).neg_().addcmul_(degree, u).mul_(r_mask)

    rhs = r_mask * neighbour_sum(known)
    coarsest = start is None
    if coarsest:  # start from the mean known colour
        start = known.sum((2, 3), keepdim=True) / (1 - r_mask).sum((2, 3), keepdim=True).clamp_min(1)
    u = r_mask * start
    r = rhs - apply(u)
    p = r.clone()
    rs = (r * r).sum((2, 3), keepdim=True)
    limit = (tol**2) * (rhs * rhs).sum((2, 3), keepdim=True).clamp_min(1e-30)
    iterations = max(max_iter, 4 * max(h, w)) if coarsest else max_iter  # the coarsest: to the end
    for i in range(iterations):
        ap = apply(p)
        pap = (p * ap).sum((2, 3), keepdim=True)
        alpha = torch.where(pap > 0, rs / pap.clamp_min(1e-30), torch.zeros_like(pap))
        u.addcmul_(alpha, p)  # in place: the loop is memory-bound, a new tensor a pass costs as much
        r.addcmul_(alpha, ap, value=-1)
        rs_new = (r * r).sum((2, 3), keepdim=True)
        p.mul_(torch.where(rs > 0, rs_new / rs.clamp_min(1e-30), torch.zeros_like(rs))).add_(r)
        rs = rs_new
        if i % 8 == 7 and bool((rs <= limit).all()):  # one host sync every 8 iterations
            break
    return known + r_mask * u


def noisy_linear_impute(
    x: torch.Tensor, removed: torch.Tensor, noise: torch.Tensor, *, tol: float = 1e-4
) -> torch.Tensor:
    """:func:`linear_impute` plus ``noise`` (broadcast to ``x``) on the removed pixels only."""
    return linear_impute(x, removed, tol=tol) + removed.to(x.dtype) * noise
