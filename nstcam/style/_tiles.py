"""Tiled stylisation: a scale larger than ``tile`` px is optimised window by window, so the memory
of a step follows the tile size, not the output size.

At such a scale:
- the style targets are the Gram matrices of the *whole* style image at that scale, computed once,
  themselves tile by tile (each window read with a margin of context and only its core counted),
  so even an 8192 px style image never passes through the network whole;
- the windows are ``tile`` x ``tile`` px (smaller only where the image is), at least
  ``tile_overlap`` px apart from their neighbours' edges, spread evenly, and taken in row-major
  order (top row left to right, then the next row);
- each window starts from the scale's starting image (the previous scale's result upscaled, else
  the ``init``) and is optimised for ``steps`` evaluations against the content features of the
  same window and the whole image's style Grams: a tiled scale therefore costs
  ``steps x number of windows`` evaluations, all counted by the progress callback. (Starting a
  window from the blend its predecessors left was tried: within a finite budget the edge between
  their stylised part and its unstylised rest survives as a seam.)
- each result is added into the image with a weight that ramps linearly from 0 to 1 over
  ``tile_overlap`` px at every edge shared with a neighbour, and the image is the weighted mean,
  so no seam shows.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from PIL import Image

from nstcam.style._optimize import init_image, optimize
from nstcam.style._output import to_output
from nstcam.style._plan import Plan
from nstcam.style._progress import Progress
from nstcam.style._runtime import Runtime
from nstcam.style._targets import Targets, batch_style_targets, scale_images
from nstcam.style._types import Cancelled
from nstcam.style._windows import Window, tile_grid
from nstcam.style.hooks import VGGFeatureHooks

__all__ = ["blend_weight", "optimize_tiled", "tiles_per_scale"]


def tiles_per_scale(sizes: list[tuple[int, int]], plan: Plan) -> list[int]:
    """How many windows each scale (given as (width, height)) is optimised in (1: whole)."""
    if plan.tile is None:
        return [1] * len(sizes)
    return [
        len(tile_grid(h, w, plan.tile, plan.tile_overlap)) if max(w, h) > plan.tile else 1 for w, h in sizes
    ]


def _ramp(start: int, stop: int, length: int, overlap: int, device: torch.device) -> torch.Tensor:
    r = torch.ones(stop - start, device=device)
    n = min(overlap, stop - start)
    if n > 0:
        up = (torch.arange(n, device=device) + 0.5) / n
        if start > 0:
            r[:n] = torch.minimum(r[:n], up)
        if stop < length:
            r[-n:] = torch.minimum(r[-n:], up.flip(0))
    return r


def blend_weight(win: Window, height: int, width: int, overlap: int, device: torch.device) -> torch.Tensor:
    """(1, 1, h, w) weight of a window's result: 1 inside, a linear ramp over ``overlap`` px at each
    edge that is not the image's."""
    ys, xs = win
    ry = _ramp(ys.start, ys.stop, height, overlap, device)
    rx = _ramp(xs.start, xs.stop, width, overlap, device)
    return (ry[:, None] * rx[None, :])[None, None]


def optimize_tiled(
    rt: Runtime,
    hooks: VGGFeatureHooks,
    contents: list[Image.Image],
    styles: list[Image.Image],
    plan: Plan,
    side: int,
    cache: dict,
    prev: torch.Tensor | None,
    scale: int,
    n_steps: int,
    progress: Progress,
    make_loss: Callable[[Targets], Callable[[torch.Tensor], torch.Tensor]],
) -> torch.Tensor:
    """One scale of the run optimised window by window (see the module docstring); returns the
    (N, 3, H, W) images at this scale.

    Raises:
        Cancelled: holding the whole image as blended so far, the current window's best in place.
    """
    full, seen = scale_images(rt, contents, plan, side)
    style = batch_style_targets(rt, hooks, styles, plan, side, seen, cache)
    start = init_image(rt, prev, seen, styles, plan).detach()
    n, _, h, w = start.shape
    num = torch.zeros_like(start)
    den = torch.zeros(n, 1, h, w, device=start.device)

    def composed(win: Window, best: torch.Tensor) -> torch.Tensor:
        img = torch.where(den > 0, num / den.clamp_min(1e-12), start)
        img[..., win[0], win[1]] = best.detach()
        return img

    for win in tile_grid(h, w, plan.tile, plan.tile_overlap):
        x = start[..., win[0], win[1]].contiguous().requires_grad_(True)
        with torch.no_grad():
            feats = rt.features(hooks, seen[..., win[0], win[1]].contiguous())
        targets = Targets(content={k: feats[k].detach().float() for k in plan.content_layers}, style=style)
        del feats

        def preview(best: torch.Tensor, win: Window = win) -> Image.Image:
            return to_output(rt, composed(win, best)[:1], full[:1], plan)

        try:
            best = optimize(make_loss(targets), x, plan, scale, n_steps, progress, preview)
        except Cancelled as e:
            best = e.image if isinstance(e.image, torch.Tensor) else x.detach()
            raise Cancelled(composed(win, best.clamp(0, 1)), e.history) from e
        weight = blend_weight(win, h, w, plan.tile_overlap, start.device)
        num[..., win[0], win[1]] += weight * best.detach()
        den[..., win[0], win[1]] += weight
    return (num / den.clamp_min(1e-12)).clamp(0, 1)
