"""One stylisation, scale by scale, of one image or a batch of same-size images. Everything it makes
(plan copy, hooks, targets, images, optimiser, progress) belongs to this call alone, so calls may run
in parallel on one engine."""

from __future__ import annotations

import copy
import logging
import time
from collections.abc import Callable

import numpy as np
import torch
from PIL import Image

from nstcam.anchor import PixelAnchor
from nstcam.image import image_to_tensor, long_side_size, resize_long_side
from nstcam.style._anchors import start_images, with_anchors
from nstcam.style._compiled import compiled_loss, sqrt_method
from nstcam.style._fast_init import fast_start
from nstcam.style._memory import check_memory, print_tile
from nstcam.style._optimize import compute_losses, init_image, optimize
from nstcam.style._output import finish, to_output
from nstcam.style._plan import Plan
from nstcam.style._progress import Progress
from nstcam.style._runtime import Runtime
from nstcam.style._targets import Targets, scale_inputs
from nstcam.style._tiles import optimize_tiled, tiles_per_scale
from nstcam.style._types import Cancelled, StepInfo
from nstcam.style.hooks import VGGFeatureHooks
from nstcam.style.options import fitted_steps

__all__ = ["run", "run_many", "sizes_at_scales"]

logger = logging.getLogger(__name__)


def sizes_at_scales(content: Image.Image, plan: Plan) -> tuple[tuple[int, int], ...]:
    """The (width, height) of ``content`` at every scale of ``plan``: images that agree on it can
    be optimised together."""
    return tuple(long_side_size(content.size, s) for s in plan.scales)


def run(
    rt: Runtime,
    content: Image.Image,
    styles: list[Image.Image],
    plan: Plan,
    callback: Callable[[StepInfo], bool | None] | None,
    progress_bar: bool | None,
    cache: dict,
    mask: np.ndarray | None = None,
    *,
    init: Image.Image | None = None,
    anchors: list[PixelAnchor] | None = None,
    regions: list[np.ndarray | None] | None = None,
) -> Image.Image:
    """Stylises ``content`` as ``plan`` says; see :meth:`nstcam.StyleTransfer.stylize`
    (``regions``: one mask per style, :mod:`nstcam.style._regions`).

    Raises:
        Cancelled: ``callback`` returned False; holds the partial result as an image.
    """
    return run_many(
        rt,
        [content],
        styles,
        plan,
        callback,
        progress_bar,
        cache,
        [mask],
        inits=[init],
        anchors=[anchors or []],
        regions=regions,
    )[0]


def run_many(
    rt: Runtime,
    contents: list[Image.Image],
    styles: list[Image.Image],
    plan: Plan,
    callback: Callable[[StepInfo], bool | None] | None,
    progress_bar: bool | None,
    cache: dict,
    masks: list[np.ndarray | None],
    *,
    inits: list[Image.Image | None] | None = None,
    anchors: list[list[PixelAnchor]] | None = None,
    regions: list[np.ndarray | None] | None = None,
) -> list[Image.Image]:
    """Stylises same-size ``contents`` together: one forward and backward pass per step for all,
    each image with its own targets and losses (so each gets what a run of its own gives, up to
    float noise, with Adam; L-BFGS's shared line search would couple them). ``inits`` are start
    images (``plan.init == "image"``), ``anchors`` each image's pixel anchors, ``regions`` one mask
    per style (for every image) where each style has its own region.

    Raises:
        Cancelled: ``callback`` returned False; holds the first image's partial result.
    """
    plan = copy.deepcopy(plan)
    if len({sizes_at_scales(c, plan) for c in contents}) != 1:
        raise ValueError(
            "run_many needs contents of one size at every scale; group them with sizes_at_scales"
        )
    anchors = anchors or [[] for _ in contents]
    _check_combination(plan, masks, regions, anchors)
    if _tiles_combine(plan, regions, anchors):
        print_tile(rt, plan, contents[0], batch=len(contents))
    if plan.extra.get("strength") == 0:  # strength 0: the photo, as it is, at the output's size
        return [the_photo(rt, c, plan) for c in contents]
    check_memory(rt, plan, contents[0], batch=len(contents))
    report_every = plan.extra.get("progress_every") or (1 if rt.device.type == "cpu" else 10)
    sizes = sizes_at_scales(contents[0], plan)
    if plan.extra.get("auto_steps"):  # the defaults' work: a 3:2 photo's, whatever the shape
        plan.steps = fitted_steps(plan.steps, *sizes[-1])
    windows = tiles_per_scale(list(sizes), plan)
    plan.extra["tiles_per_scale"] = windows
    plan.init = resolved_init(plan, regions, tiled=max(windows) > 1)  # after _check_combination
    total = sum(n * k for n, k in zip(plan.steps, windows, strict=True))
    progress = Progress(
        total, len(contents), callback, plan.preview_every, report_every, progress_bar, len(plan.scales)
    )
    x: torch.Tensor | None = None
    moments: dict = {}  # with average and Adam: its moment estimates, carried from scale to scale
    try:
        with VGGFeatureHooks(rt.net, plan.layers) as hooks:
            for si, (side, n_steps) in enumerate(zip(plan.scales, plan.steps, strict=True)):
                if windows[si] > 1:
                    x = optimize_tiled(
                        rt,
                        hooks,
                        contents,
                        styles,
                        plan,
                        side,
                        cache,
                        x,
                        si,
                        n_steps,
                        progress,
                        lambda targets: _loss_fn(rt, hooks, targets, plan),
                    )
                    continue
                inputs = scale_inputs(rt, hooks, contents, styles, plan, side, cache, masks, regions)
                targets = inputs.targets
                start = start_images(rt, inits, inputs.seen, plan) if x is None else None
                if x is None and plan.init == "fast" and targets.mask is not None:
                    x = fast_start(
                        rt, inputs.seen, styles, plan, targets
                    )  # the painting where the style goes
                else:
                    x = init_image(rt, x, inputs.seen, styles, plan, start)
                if si > 0 and targets.mask is not None:  # upscaling blurred the kept region: restore it
                    with torch.no_grad():
                        x.copy_(targets.mask * x + (1 - targets.mask) * inputs.seen)

                def preview(best: torch.Tensor, full: torch.Tensor = inputs.full) -> Image.Image:
                    return to_output(rt, best[:1], full[:1], plan)

                loss_fn = with_anchors(_loss_fn(rt, hooks, targets, plan), rt, anchors, inputs.seen, plan)
                x = optimize(loss_fn, x, plan, si, n_steps, progress, preview, moments)
    except Cancelled as e:
        partial = e.image if isinstance(e.image, torch.Tensor) else x
        progress.close()
        image = None
        if partial is not None:
            image = finish(rt, partial[:1], contents[0], plan, progress.histories[0], progress.t0, masks[0])
        raise Cancelled(image, progress.histories[0]) from e
    finally:
        progress.close()
    return [
        finish(rt, x[i : i + 1], c, plan, progress.histories[i], progress.t0, m)
        for i, (c, m) in enumerate(zip(contents, masks, strict=True))
    ]


def _check_combination(
    plan: Plan, masks: list[np.ndarray | None], regions: list[np.ndarray | None] | None, anchors: list
) -> None:
    """Records the masks in ``plan.extra`` and refuses what does not combine (tiles with a mask
    optimised in place, anchors or a start image; a style per region with any of those)."""
    shapes = {None if m is None else m.shape for m in masks}
    plan.extra["style_mask"] = next((f"{m.shape[1]}x{m.shape[0]}" for m in masks if m is not None), None)
    if len(shapes - {None}) > 1:
        plan.extra["style_mask"] = "per image"
    if regions:
        plan.extra["style_masks"] = [None if m is None else f"{m.shape[1]}x{m.shape[0]}" for m in regions]
        if plan.tile is not None or plan.extra["mask_mode"] != "optimize" or plan.extra["style_mask"]:
            raise ValueError(
                "style_masks take neither tile, mask_mode='blend' nor a style_mask; leave those unset"
            )
    if plan.tile is not None and plan.extra["style_mask"] and plan.extra["mask_mode"] == "optimize":
        raise ValueError(
            "tile does not combine with a style_mask in mask_mode='optimize'; use mask_mode='blend'"
        )
    if plan.tile is not None and (any(anchors) or plan.init == "image"):
        raise ValueError("tile does not combine with an init image or anchors yet; leave tile unset")


def _tiles_combine(plan: Plan, regions: list | None, anchors: list) -> bool:
    """Whether this run may be tiled (what :func:`_check_combination` refuses with a tile)."""
    in_place = plan.extra["style_mask"] and plan.extra["mask_mode"] == "optimize"
    return not (regions or in_place or any(anchors) or plan.init == "image")


def resolved_init(plan: Plan, regions: list | None, tiled: bool) -> str:
    """``init="auto"`` resolved for this run: the fast painting wherever its network's weights are
    here (in tiles, with a style mask or a style per region too: :func:`fast_start`), else the
    content, said in one log line. Any other init as given."""
    if plan.init != "auto":
        return plan.init
    from nstcam.fast import fast_available  # the fast engine builds on this package

    if fast_available():
        return "fast"
    logger.info(
        "init='auto' starts from the content: the fast network's weights are not here "
        "(`nstcam weights import-fast` imports them)"
    )
    return "content"


def the_photo(rt: Runtime, content: Image.Image, plan: Plan) -> Image.Image:
    """``content`` at the planned size, as a stylisation's result (no step run, an empty history):
    what strength 0 asks for."""
    x = image_to_tensor(resize_long_side(content, plan.size), rt.device)
    return finish(rt, x, content, plan, [], time.perf_counter())


def _loss_fn(
    rt: Runtime, hooks: VGGFeatureHooks, targets: Targets, plan: Plan
) -> Callable[[torch.Tensor], torch.Tensor]:
    """The step's losses: compiled where the engine compiles (no mask), else eager through hooks."""

    compiled = rt.compile and targets.mask is None
    sqrt = sqrt_method(rt.device) if compiled else "eigh"  # a compiled run's eager steps: the same function

    def eager(x: torch.Tensor, directions: dict | None = None) -> torch.Tensor:
        return compute_losses(rt, hooks, x, targets, plan, directions, sqrt)

    eager.new_block = targets.new_block  # L-BFGS with the sliced loss: new directions between blocks

    if compiled:
        return compiled_loss(rt, targets, plan, eager)
    return eager
