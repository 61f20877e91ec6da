"""Style masks: loading them from anything array-like, and turning a saliency map into a soft mask."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image

__all__ = ["MaskSource", "heatmap_to_mask", "load_mask", "resize_mask"]

MaskSource = np.ndarray | Image.Image | torch.Tensor | str | os.PathLike


def load_mask(src: MaskSource, name: str = "style_mask") -> np.ndarray:
    """Returns a float32 H x W mask in [0, 1].

    Args:
        src: an H x W (or H x W x 1) array or tensor of floats in [0, 1], bools, or uint8 0-255; a PIL
            image (any mode; converted to greyscale, 255 -> 1); or a path to an image file.
        name: the argument's name in error messages.

    Raises:
        ValueError: wrong shape, NaN or infinite values, or floats outside [0, 1].
    """
    if isinstance(src, (str, os.PathLike)):
        path = Path(src)
        if not path.is_file():
            raise FileNotFoundError(f"{name}: mask file not found: {path}")
        with Image.open(path) as im:
            src = im.convert("L")
    if isinstance(src, Image.Image):
        return np.asarray(src.convert("L"), dtype=np.float32) / 255.0
    if isinstance(src, torch.Tensor):
        src = src.detach().float().cpu().numpy()
    a = np.asarray(src)
    if a.ndim == 3 and a.shape[-1] == 1:
        a = a[..., 0]
    if a.ndim != 2:
        raise ValueError(f"{name} must be H x W, got shape {a.shape}")
    if a.dtype == np.bool_:
        return a.astype(np.float32)
    if a.dtype == np.uint8:
        return a.astype(np.float32) / 255.0
    a = a.astype(np.float32)
    if not np.isfinite(a).all():
        raise ValueError(f"{name} contains NaN or infinite values")
    if a.min() < 0 or a.max() > 1:
        raise ValueError(f"{name} values must lie in [0, 1], got [{a.min():.3g}, {a.max():.3g}]")
    return a


def resize_mask(mask: np.ndarray | torch.Tensor, size: tuple[int, int], device=None) -> torch.Tensor:
    """Resizes a mask to ``size`` = (H, W) as a (1, 1, H, W) float tensor (area when shrinking,
    else bilinear); a batch of masks ``(N, 1, h, w)`` stays a batch."""
    t = torch.as_tensor(mask, dtype=torch.float32, device=device)
    if t.ndim != 4:
        t = t.view(1, 1, *t.shape[-2:])
    if tuple(t.shape[-2:]) == tuple(size):
        return t
    shrink = size[0] <= t.shape[-2] and size[1] <= t.shape[-1]
    if shrink:
        return F.interpolate(t, size=size, mode="area")
    return F.interpolate(t, size=size, mode="bilinear", align_corners=False).clamp(0, 1)


def _gaussian_blur(t: torch.Tensor, sigma: float) -> torch.Tensor:
    radius = max(1, int(3 * sigma + 0.5))
    x = torch.arange(-radius, radius + 1, dtype=torch.float32)
    k = torch.exp(-(x**2) / (2 * sigma**2))
    k = (k / k.sum()).to(t)
    t = F.pad(t, (radius, radius, 0, 0), mode="replicate")
    t = F.conv2d(t, k.view(1, 1, 1, -1))
    t = F.pad(t, (0, 0, radius, radius), mode="replicate")
    return F.conv2d(t, k.view(1, 1, -1, 1))


def heatmap_to_mask(
    heatmap: np.ndarray, *, threshold: float = 0.5, dilate: int = 4, feather: float = 8.0
) -> np.ndarray:
    """Turns a [0, 1] saliency map into a soft subject mask (1 on the subject).

    The map is thresholded, dilated by ``dilate`` pixels (a square max filter), then feathered with a
    Gaussian of standard deviation ``feather`` pixels.
    """
    if not 0 <= threshold <= 1:
        raise ValueError(f"threshold must be in [0, 1], got {threshold}")
    if dilate < 0 or feather < 0:
        raise ValueError("dilate and feather must be >= 0")
    t = torch.as_tensor(np.asarray(heatmap, dtype=np.float32)).view(1, 1, *heatmap.shape[-2:])
    m = (t >= threshold).float()
    if dilate:
        m = F.max_pool2d(m, kernel_size=2 * dilate + 1, stride=1, padding=dilate)
    if feather > 0:
        m = _gaussian_blur(m, feather)
    return m[0, 0].clamp(0, 1).numpy()
