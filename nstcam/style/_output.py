"""From the optimised tensor to the image a user gets: colours, the post-hoc mask blend, metadata."""

from __future__ import annotations

import time

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image

from nstcam._version import __version__
from nstcam.color import merge_luminance
from nstcam.image import image_to_tensor, resize_long_side, tensor_to_image
from nstcam.mask import resize_mask
from nstcam.style._plan import Plan
from nstcam.style._runtime import Runtime

__all__ = ["finish", "to_output"]


def to_output(
    rt: Runtime, x: torch.Tensor, c_full: torch.Tensor, plan: Plan, mask: np.ndarray | None = None
) -> Image.Image:
    """The image a user sees: colours restored if asked, and the post-hoc mask blend if asked."""
    y = x.clamp(0, 1)
    if plan.luminance:
        y = merge_luminance(y, c_full)
    if mask is not None and plan.extra["mask_mode"] == "blend":
        m = resize_mask(mask, tuple(c_full.shape[-2:]), rt.device)
        y = m * y + (1 - m) * c_full
    return tensor_to_image(y)


def finish(
    rt: Runtime,
    x: torch.Tensor,
    content: Image.Image,
    plan: Plan,
    history: list,
    t0: float,
    mask: np.ndarray | None = None,
) -> Image.Image:
    """The final image at the planned size, with ``info["nstcam"]``: parameters, history, weights."""
    c_full = image_to_tensor(resize_long_side(content, plan.size), rt.device)
    if x.shape[-2:] != c_full.shape[-2:]:
        x = F.interpolate(x, size=c_full.shape[-2:], mode="bicubic", align_corners=False)
    img = to_output(rt, x, c_full, plan, mask)
    img.info["nstcam"] = {
        "nstcam": __version__,
        "weights": rt.weights.notice,
        "random_weights": rt.weights.is_random,
        "device": str(rt.device),
        "seconds": round(time.perf_counter() - t0, 3),
        "params": plan.as_dict(),
        "final_losses": history[-1] if history else None,
        "history": history,
    }
    return img
