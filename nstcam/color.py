"""Colour preservation, shared by both style engines (the optimisation and the fast networks):
luminance and chroma (BT.601 YUV) for ``preserve_color="luminance"``, and colour-statistics
matching for ``preserve_color="histogram"``; :func:`preserve_colors` applies either to a result."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

__all__ = [
    "PRESERVE_COLOR_MODES",
    "ColorSums",
    "color_map",
    "color_stats",
    "luminance_only",
    "match_color",
    "match_luminance",
    "merge_luminance",
    "preserve_colors",
    "rgb_to_yuv",
    "yuv_to_rgb",
]

_RGB2YUV = torch.tensor(
    [[0.299, 0.587, 0.114], [-0.14713, -0.28886, 0.436], [0.615, -0.51499, -0.10001]], dtype=torch.float64
)
_YUV2RGB = torch.linalg.inv(_RGB2YUV)


def _apply(m: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    return torch.einsum("ij,njhw->nihw", m.to(device=x.device, dtype=x.dtype), x)


def rgb_to_yuv(x: torch.Tensor) -> torch.Tensor:
    """``(N, 3, H, W)`` RGB in [0, 1] -> YUV (Y in [0, 1])."""
    return _apply(_RGB2YUV, x)


def yuv_to_rgb(x: torch.Tensor) -> torch.Tensor:
    """Inverse of :func:`rgb_to_yuv` (not clamped)."""
    return _apply(_YUV2RGB, x)


def luminance_only(x: torch.Tensor) -> torch.Tensor:
    """The luminance of ``x`` repeated on three channels."""
    return rgb_to_yuv(x)[:, :1].expand(-1, 3, -1, -1).contiguous()


def match_luminance(style: torch.Tensor, content: torch.Tensor) -> torch.Tensor:
    """Grey style whose luminance has the content's mean and standard deviation."""
    ys, yc = rgb_to_yuv(style)[:, :1], rgb_to_yuv(content)[:, :1]
    y = (ys - ys.mean()) / ys.std().clamp_min(1e-6) * yc.std() + yc.mean()
    return y.clamp(0, 1).expand(-1, 3, -1, -1).contiguous()


def merge_luminance(luma_from: torch.Tensor, chroma_from: torch.Tensor) -> torch.Tensor:
    """RGB with the luminance of ``luma_from`` and the chroma of ``chroma_from`` (same size)."""
    yuv = rgb_to_yuv(chroma_from)
    yuv = torch.cat([rgb_to_yuv(luma_from)[:, :1], yuv[:, 1:]], 1)
    return yuv_to_rgb(yuv).clamp(0, 1)


def color_stats(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean (3,) and covariance (3, 3) of the RGB pixels of ``x`` (1, 3, H, W), in float64."""
    p = x.reshape(3, -1).double()
    mu = p.mean(1)
    d = p - mu[:, None]
    return mu, d @ d.T / max(1, d.shape[1] - 1)


def _sqrt_and_inverse(cov: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    vals, vecs = torch.linalg.eigh(cov)
    vals = vals.clamp_min(1e-8)  # a flat (single-colour) image has a singular covariance
    return vecs @ torch.diag(vals.sqrt()) @ vecs.T, vecs @ torch.diag(vals.rsqrt()) @ vecs.T


def color_map(
    source: tuple[torch.Tensor, torch.Tensor], target: tuple[torch.Tensor, torch.Tensor]
) -> Callable[[torch.Tensor], torch.Tensor]:
    """The per-pixel map that gives pixels of colour statistics ``source`` (mean, covariance) those
    of ``target``: ``x' = C_t^(1/2) C_s^(-1/2) (x - mu_s) + mu_t``, clamped to [0, 1]. A picture
    read in pieces applies it piece by piece (its statistics: :class:`ColorSums`)."""
    (mu_s, cov_s), (mu_t, cov_t) = source, target
    sqrt_t, _ = _sqrt_and_inverse(cov_t)
    _, inv_sqrt_s = _sqrt_and_inverse(cov_s)
    a = sqrt_t @ inv_sqrt_s

    def apply(x: torch.Tensor) -> torch.Tensor:
        p = x.reshape(3, -1).double()
        out = a.to(p.device) @ (p - mu_s.to(p.device)[:, None]) + mu_t.to(p.device)[:, None]
        return out.to(x.dtype).reshape(x.shape).clamp(0, 1)

    return apply


class ColorSums:
    """The mean and covariance of RGB pixels read in pieces, as :func:`color_stats` gives them for
    the whole (float64 sums; a piece (1, 3, h, w) in [0, 1] or (h, w, 3) uint8)."""

    def __init__(self) -> None:
        self.n, self.s, self.s2 = (
            0,
            torch.zeros(3, dtype=torch.float64),
            torch.zeros(3, 3, dtype=torch.float64),
        )

    def add(self, piece: torch.Tensor | np.ndarray) -> ColorSums:
        if isinstance(piece, np.ndarray):
            p = torch.from_numpy(piece.reshape(-1, 3).T.astype(np.float64) / 255.0)
        else:
            p = piece.detach().reshape(3, -1).double().cpu()
        self.n += p.shape[1]
        self.s += p.sum(1)
        self.s2 += p @ p.T
        return self

    def stats(self) -> tuple[torch.Tensor, torch.Tensor]:
        mu = self.s / self.n
        return mu, (self.s2 - self.n * torch.outer(mu, mu)) / max(1, self.n - 1)


def match_color(source: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """``source`` (1, 3, H, W) recoloured so that its RGB pixels have the mean and covariance of
    ``target``'s (Gatys et al. 2016, "Preserving color in neural artistic style transfer", the
    eigen form: ``x' = C_t^(1/2) C_s^(-1/2) (x - mu_s) + mu_t``), clamped to [0, 1]."""
    return color_map(color_stats(source), color_stats(target))(source)


PRESERVE_COLOR_MODES = ("luminance", "histogram")


def preserve_colors(stylised: torch.Tensor, content: torch.Tensor, mode: str) -> torch.Tensor:
    """``stylised`` (1, 3, H, W) with the colours of ``content`` (same size), for a result made
    without them (the fast networks'), as ``StyleTransfer.stylize(preserve_color=...)`` keeps them.

    Args:
        mode: ``"luminance"``: the stylised luminance with the content's chroma (BT.601 YUV);
            ``"histogram"``: the stylised pixels recoloured to the content's RGB mean and covariance.
    """
    if mode == "luminance":
        return merge_luminance(stylised, content)
    if mode == "histogram":
        return match_color(stylised, content)
    modes = " or ".join(PRESERVE_COLOR_MODES)
    raise ValueError(f"preserve_color must be None, {modes}, got {str(mode)[:30]!r}")
