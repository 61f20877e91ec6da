"""The optimisation at one scale: the starting image, the losses, and the L-BFGS or Adam loop."""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from PIL import Image

from nstcam.image import image_to_tensor
from nstcam.style._color import luminance_only
from nstcam.style._losses import content_loss, gram, style_loss, total_variation
from nstcam.style._plan import Plan
from nstcam.style._progress import Progress
from nstcam.style._runtime import Runtime
from nstcam.style._targets import Targets
from nstcam.style._types import BudgetSpent
from nstcam.style.hooks import VGGFeatureHooks

__all__ = ["compute_losses", "init_image", "optimize"]

_KEEP = 10.0  # with a style mask: content loss weight where the mask is 0, relative to where it is 1
_PIXEL_KEEP = 100.0  # with a style mask: weight of the pixel-space content anchor where the mask is 0


def init_image(
    rt: Runtime,
    prev: torch.Tensor | None,
    c_in: torch.Tensor,
    styles: list[Image.Image],
    plan: Plan,
    gen: torch.Generator,
) -> torch.Tensor:
    """The image to optimise at this scale: the previous scale's result upscaled, else per ``init``."""
    h, w = c_in.shape[-2:]
    if prev is not None:
        x = F.interpolate(prev, size=(h, w), mode="bicubic", align_corners=False).clamp(0, 1)
    elif plan.init == "content":
        x = c_in.clone()
    elif plan.init == "noise":
        x = torch.rand(c_in.shape, generator=gen).to(rt.device)
    else:  # style, blended by weight where several
        x = torch.zeros_like(c_in)
        for img, wt in zip(styles, plan.blend, strict=True):
            s = image_to_tensor(img.resize((w, h), Image.Resampling.LANCZOS), rt.device)
            x += wt * (luminance_only(s) if plan.preserve_color else s)
    return x.detach().contiguous().requires_grad_(True)


def compute_losses(
    rt: Runtime, hooks: VGGFeatureHooks, x: torch.Tensor, targets: Targets, plan: Plan
) -> dict[str, torch.Tensor]:
    """Weighted content, style and total-variation losses of ``x``, and their sum ``total``."""
    feats = rt.features(hooks, x)
    if targets.mask is None:
        c = sum(content_loss(feats[n], targets.content[n]) for n in plan.content_layers)
        grams = {n: gram(feats[n]) for n in plan.style_layers}
    else:  # style where the mask is 1; content kept KEEP times harder where it is 0
        c = sum(
            content_loss(
                feats[n], targets.content[n], mask=1 + (_KEEP - 1) * (1 - targets.mask_for(feats[n]))
            )
            for n in plan.content_layers
        )
        grams = {n: gram(feats[n], mask=targets.mask_for(feats[n])) for n in plan.style_layers}
        c = c + _PIXEL_KEEP * len(plan.content_layers) * content_loss(
            x, targets.pixels, mask=1 - targets.mask
        )
    c = c / len(plan.content_layers)
    s = style_loss(grams, targets.style, plan.style_layers)
    tv = total_variation(x)
    total = plan.content_weight * c + plan.style_weight * s + plan.tv_weight * tv
    return {
        "total": total,
        "content": plan.content_weight * c,
        "style": plan.style_weight * s,
        "tv": plan.tv_weight * tv,
    }


def _make_optimizer(x: torch.Tensor, plan: Plan, n_steps: int) -> torch.optim.Optimizer:
    if plan.optimizer == "lbfgs":
        return torch.optim.LBFGS(
            [x],
            lr=plan.lr,
            max_iter=n_steps,
            max_eval=n_steps,
            history_size=plan.history_size,
            tolerance_grad=0.0,
            tolerance_change=0.0,
            line_search_fn="strong_wolfe",
        )
    return torch.optim.Adam([x], lr=plan.lr)


def optimize(
    rt: Runtime,
    hooks: VGGFeatureHooks,
    x: torch.Tensor,
    targets: Targets,
    plan: Plan,
    scale: int,
    n_steps: int,
    progress: Progress,
    preview: Callable[[torch.Tensor], Image.Image],
) -> torch.Tensor:
    """Runs exactly ``n_steps`` evaluations (forward + backward) and returns the best image seen.

    L-BFGS sees the image through a clamp, so every point it evaluates is a valid image and its line
    search sees one consistent function; Adam's iterate is projected onto [0, 1] instead.
    """
    lbfgs = plan.optimizer == "lbfgs"
    opt = _make_optimizer(x, plan, n_steps)
    done = 0
    best: list = [math.inf, x.detach().clone()]
    size = (x.shape[-1], x.shape[-2])

    def closure() -> torch.Tensor:
        nonlocal done
        if done >= n_steps:  # the line search wants more than the budget allows
            raise BudgetSpent
        opt.zero_grad(set_to_none=True)
        if not lbfgs:
            with torch.no_grad():
                x.clamp_(0, 1)
        losses = compute_losses(rt, hooks, x.clamp(0, 1) if lbfgs else x, targets, plan)
        losses["total"].backward()
        done += 1
        values = {k: float(v.detach()) for k, v in losses.items()}
        if values["total"] < best[0]:
            best[0] = values["total"]
            best[1] = x.detach().clamp(0, 1)
        progress.step(scale, size, values, best[1], preview)
        return losses["total"]

    try:
        if lbfgs:
            while done < n_steps:  # each LBFGS.step stops at max_eval evaluations
                opt.param_groups[0]["max_iter"] = opt.param_groups[0]["max_eval"] = n_steps - done
                opt.step(closure)
        else:
            for _ in range(n_steps):
                opt.step(closure)
    except BudgetSpent:
        pass
    return best[1]
