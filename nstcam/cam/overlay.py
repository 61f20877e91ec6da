"""Heatmaps over images."""

from __future__ import annotations

import numpy as np
from PIL import Image

__all__ = ["overlay_heatmap"]


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
