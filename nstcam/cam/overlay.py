"""Heatmaps over images."""

from __future__ import annotations

import numpy as np
from PIL import Image

__all__ = ["mark_region", "overlay_heatmap"]


def overlay_heatmap(
    image: Image.Image, heatmap: np.ndarray, *, colormap: str = "jet", alpha: float = 0.5
) -> Image.Image:
    """Blends a [0, 1] heatmap, coloured with a matplotlib colormap, over an RGB image.

    ``out = (1 - alpha) * image + alpha * colormap(heatmap)``; the heatmap is resized to the image.
    """
    from matplotlib import colormaps

    if not 0 <= alpha <= 1:
        raise ValueError(f"alpha must be in [0, 1], got {alpha}")
    img = np.asarray(image.convert("RGB"), dtype=np.float32) / 255.0
    h, w = img.shape[:2]
    if heatmap.shape != (h, w):
        heatmap = np.asarray(Image.fromarray(heatmap.astype(np.float32), "F").resize((w, h), Image.BILINEAR))
    colour = colormaps[colormap](np.clip(heatmap, 0, 1))[..., :3].astype(np.float32)  # RGBA -> RGB
    out = (1 - alpha) * img + alpha * colour
    return Image.fromarray(np.clip(out * 255 + 0.5, 0, 255).astype(np.uint8), "RGB")


def mark_region(
    image: Image.Image,
    *,
    box: tuple[float, float, float, float] | None = None,
    mask: np.ndarray | None = None,
    colour: tuple[int, int, int] = (255, 255, 255),
) -> Image.Image:
    """``image`` with a detection's box or a segment's mask outline drawn over it (3 px, ``colour``,
    with a dark edge so that it shows on light and dark images alike)."""
    from PIL import ImageDraw

    out = image.convert("RGB").copy()
    if box is not None:
        draw = ImageDraw.Draw(out)
        x0, y0, x1, y1 = box
        draw.rectangle((x0 - 1, y0 - 1, x1 + 1, y1 + 1), outline=(0, 0, 0), width=1)
        draw.rectangle((x0, y0, x1, y1), outline=colour, width=3)
    if mask is not None:
        m = np.asarray(mask, dtype=bool)
        edge = m & ~_eroded(m, 3)
        dark = _dilated(edge, 1) & ~edge
        a = np.asarray(out).copy()
        a[dark] = 0
        a[edge] = colour
        out = Image.fromarray(a, "RGB")
    return out


def _eroded(m: np.ndarray, r: int) -> np.ndarray:
    return ~_dilated(~m, r)


def _dilated(m: np.ndarray, r: int) -> np.ndarray:
    """``m`` grown by ``r`` px (a square window), by shifted ORs: no SciPy needed."""
    out = m.copy()
    padded = np.pad(m, r, constant_values=False)
    h, w = m.shape
    for dy in range(2 * r + 1):
        for dx in range(2 * r + 1):
            out |= padded[dy : dy + h, dx : dx + w]
    return out
