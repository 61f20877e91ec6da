"""One stylisation, scale by scale: everything it makes (plan copy, hooks, targets, image,
optimiser, progress) belongs to this call alone, so calls may run in parallel on one engine."""

from __future__ import annotations

import copy
from collections.abc import Callable

import numpy as np
import torch
from PIL import Image

from nstcam.style._memory import check_memory
from nstcam.style._optimize import init_image, optimize
from nstcam.style._output import finish, to_output
from nstcam.style._plan import Plan
from nstcam.style._progress import Progress
from nstcam.style._runtime import Runtime
from nstcam.style._targets import scale_inputs
from nstcam.style._types import Cancelled, StepInfo
from nstcam.style.hooks import VGGFeatureHooks

__all__ = ["run"]


def run(
    rt: Runtime,
    content: Image.Image,
    styles: list[Image.Image],
    plan: Plan,
    callback: Callable[[StepInfo], bool | None] | None,
    progress_bar: bool,
    cache: dict,
    mask: np.ndarray | None = None,
) -> Image.Image:
    """Stylises ``content`` as ``plan`` says; see :meth:`nstcam.StyleTransfer.stylize`.

    Raises:
        Cancelled: ``callback`` returned False; holds the partial result as an image.
    """
    plan = copy.deepcopy(plan)
    plan.extra["style_mask"] = None if mask is None else f"{mask.shape[1]}x{mask.shape[0]}"
    check_memory(rt, plan, content)
    progress = Progress(sum(plan.steps), callback, plan.preview_every, progress_bar)
    gen = torch.Generator().manual_seed(plan.seed)
    x: torch.Tensor | None = None
    try:
        with VGGFeatureHooks(rt.net, plan.layers) as hooks:
            for si, (side, n_steps) in enumerate(zip(plan.scales, plan.steps, strict=True)):
                inputs = scale_inputs(rt, hooks, content, styles, plan, side, cache, mask)
                targets = inputs.targets
                x = init_image(rt, x, inputs.seen, styles, plan, gen)
                if si > 0 and targets.mask is not None:  # upscaling blurred the kept region: restore it
                    with torch.no_grad():
                        x.copy_(targets.mask * x + (1 - targets.mask) * inputs.seen)

                def preview(best: torch.Tensor, full: torch.Tensor = inputs.full) -> Image.Image:
                    return to_output(rt, best, full, plan)

                x = optimize(rt, hooks, x, targets, plan, si, n_steps, progress, preview)
    except Cancelled as e:
        partial = e.image if isinstance(e.image, torch.Tensor) else x
        image = None
        if partial is not None:
            image = finish(rt, partial, content, plan, progress.history, progress.t0, mask)
        raise Cancelled(image, progress.history) from e
    finally:
        progress.close()
    return finish(rt, x, content, plan, progress.history, progress.t0, mask)
