"""Pixel anchors: an extra loss term that pulls a stylisation towards a given image where a mask says.

A :class:`PixelAnchor` adds ``weight x mean over pixels and channels of mask * (x - image)^2`` to
the losses of :meth:`nstcam.StyleTransfer.stylize`. Video uses it for temporal consistency (the
previous stylised frame, warped by the optical flow, weighted by the flow's certainty; Ruder et al.
2016); any caller may use it to keep parts of an image close to a reference.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from nstcam._checks import finite
from nstcam.image import ImageSource, load_image

__all__ = ["PixelAnchor", "anchor_tensors"]


@dataclass(frozen=True)
class PixelAnchor:
    """One pixel-space anchor of a stylisation.

    Attributes:
        image: the image to stay close to (anything :func:`nstcam.load_image` takes, or a float
            ``(H, W, 3)`` array in [0, 1]); resized to each scale's size.
        mask: ``(H, W)`` weights in [0, 1] (same aspect as ``image``); None: everywhere.
        weight: weight of the term (>= 0) next to the content (1 by default) and style losses.
    """

    image: ImageSource
    mask: np.ndarray | None = None
    weight: float = 1.0

    def __post_init__(self) -> None:
        finite("anchor weight", self.weight, minimum=0)
        if self.mask is not None:
            m = np.asarray(self.mask)
            if m.ndim != 2:
                raise ValueError(f"anchor mask must be (H, W), got shape {m.shape}")


def _image_array(src: ImageSource) -> np.ndarray:
    a = np.asarray(src) if isinstance(src, np.ndarray) else None
    if a is not None and a.dtype.kind == "f":
        if a.ndim != 3 or a.shape[2] != 3:
            raise ValueError(f"anchor image must be (H, W, 3), got shape {a.shape}")
        return a.astype(np.float32, copy=False)
    return np.asarray(load_image(src), dtype=np.float32) / 255.0


def anchor_tensors(
    anchors: list[PixelAnchor], size: tuple[int, int], device: torch.device
) -> list[tuple[torch.Tensor, torch.Tensor, float]]:
    """Each anchor as ``(image (1, 3, h, w), mask (1, 1, h, w), weight)`` at ``size`` = (h, w)."""
    out = []
    for a in anchors:
        img = torch.from_numpy(np.ascontiguousarray(_image_array(a.image))).permute(2, 0, 1)[None]
        img = F.interpolate(img.to(device), size=size, mode="bilinear", align_corners=False).clamp(0, 1)
        if a.mask is None:
            m = torch.ones((1, 1, *size), device=device)
        else:
            m = torch.from_numpy(np.asarray(a.mask, dtype=np.float32))[None, None].to(device)
            m = F.interpolate(m, size=size, mode="bilinear", align_corners=False).clamp(0, 1)
        out.append((img, m, float(a.weight)))
    return out
