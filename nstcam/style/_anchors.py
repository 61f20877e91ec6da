"""Engine inputs from the caller: start images (``init=`` an image) and pixel anchors (extra loss
terms, :class:`nstcam.PixelAnchor`) at each scale's size."""

from __future__ import annotations

from collections.abc import Callable

import torch
from PIL import Image

from nstcam.anchor import PixelAnchor, anchor_tensors
from nstcam.color import luminance_only
from nstcam.image import image_to_tensor
from nstcam.style._plan import Plan
from nstcam.style._runtime import Runtime

__all__ = ["start_images", "with_anchors"]


def start_images(
    rt: Runtime, inits: list[Image.Image | None] | None, seen: torch.Tensor, plan: Plan
) -> torch.Tensor | None:
    """The given start images at the size of ``seen`` (N, 3, h, w), as the network sees them
    (luminance only when colours are preserved that way); an image without one starts from its
    content."""
    if plan.init != "image" or not inits:
        return None
    h, w = seen.shape[-2:]
    rows = []
    for i, img in enumerate(inits):
        if img is None:
            rows.append(seen[i : i + 1])
            continue
        t = image_to_tensor(img.resize((w, h), Image.Resampling.BICUBIC), rt.device)
        rows.append(luminance_only(t) if plan.luminance else t)
    return torch.cat(rows)


def with_anchors(
    loss_fn: Callable[[torch.Tensor], torch.Tensor],
    rt: Runtime,
    anchors: list[list[PixelAnchor]],
    seen: torch.Tensor,
    plan: Plan,
) -> Callable[[torch.Tensor], torch.Tensor]:
    """``loss_fn`` ((4, N) losses) plus a fifth row, each image's weighted anchor terms, added to
    the total; ``loss_fn`` itself when no image has an anchor. ``loss_fn.recover`` (the compiled
    step's fallback after a failed backward pass) is kept, with the anchors added, and so is
    ``loss_fn.new_block``."""
    if not any(anchors):
        return loss_fn
    size = tuple(seen.shape[-2:])
    per_image = []
    for row in anchors:
        terms = anchor_tensors(row, size, rt.device)
        if plan.luminance:
            terms = [(luminance_only(img), m, w) for img, m, w in terms]
        per_image.append(terms)

    def add(losses: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        extra = torch.stack(
            [
                sum((w * (m * (x[i : i + 1] - img).pow(2)).mean() for img, m, w in terms), x.new_zeros(()))
                for i, terms in enumerate(per_image)
            ]
        )
        return torch.cat([(losses[0] + extra)[None], losses[1:], extra[None].to(losses.dtype)])

    def loss(x: torch.Tensor) -> torch.Tensor:
        return add(loss_fn(x), x)

    inner = getattr(loss_fn, "recover", None)
    if inner is not None:  # the compiled step's fallback after a failed backward, anchors added
        loss.recover = lambda x, e: add(inner(x, e), x)
    if hasattr(loss_fn, "new_block"):  # L-BFGS with the sliced loss: new directions between blocks
        loss.new_block = loss_fn.new_block
    return loss
