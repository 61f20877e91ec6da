"""Luminance and chroma (BT.601 YUV) for colour-preserving style transfer."""

from __future__ import annotations

import torch

__all__ = ["luminance_only", "match_luminance", "merge_luminance", "rgb_to_yuv", "yuv_to_rgb"]

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
