"""Will a run fit? A peak-memory model of one run, calibrated against measured peaks, and the check
before a run (which, with ``on_memory="reduce"``, tiles a run that does not fit, else shrinks it).

The model: the activations of one step up to the deepest layer (``act``, the sum of the conv
outputs in bytes) times a per-device factor, plus the optimiser's state (Adam: the image and three
more of its size; L-BFGS: two vectors per history entry used), plus eight image-sized buffers
(content, best iterate, gradients, ...), plus a constant. It is the memory a run needs *beyond* the
loaded engine (weights are already in memory when the check runs).

Calibration (``tests/test_tiles.py`` checks it; ``bench_style.py --calibrate`` and ``--tile`` report it):
- CPU (2 cores, torch 2.14.1): the peak RSS of untiled runs at 256-768 px, both optimisers, above
  the RSS before each (``tests/_tile_probe.py``): factor 2.30, constant 46 MiB. ``bench_style.py
  --calibrate`` prints the table (within 20 % of every peak there); the tiled rows are in ``--tile``.
- CUDA: factor 1.2, constant 1 GiB, fitted to the three H100 peaks (torch 2.11) of issue 14:
  2048 px 9.6 GB, 4096 px 29 GB, 4351 px 28 GiB, L-BFGS. Not re-measured by the session that
  wrote this (no GPU); the issue found the earlier model about 3x pessimistic there.
"""

from __future__ import annotations

import logging

from PIL import Image
from torch import nn

from nstcam._device import available_memory
from nstcam.image import long_side_size
from nstcam.style._plan import Plan
from nstcam.style._runtime import Runtime
from nstcam.style._types import InsufficientMemoryError
from nstcam.style.losses import style_loss_named
from nstcam.style.vgg import deepest_layer, layer_index, vgg_layers

__all__ = [
    "CALIBRATION",
    "PRINT_MEMORY",
    "check_memory",
    "estimate_memory",
    "estimate_run",
    "estimate_tiled",
    "print_tile",
]

logger = logging.getLogger(__name__)

CALIBRATION = {"cpu": (2.30, 46 * 2**20), "cuda": (1.2, 2**30), "mps": (2.30, 46 * 2**20)}
"""Device type -> (activation factor, constant bytes)."""
PRINT_MEMORY = 3 * 2**30
"""A print's plan (the default scales past the preview) keeps its estimate under this: its scales
past the preview are optimised in tiles where the untiled run would need more (issue 76)."""
_BUFFERS = 8  # image-sized float32 tensors besides the optimiser's
_TILED_BUFFERS = 6  # full-size tensors a tiled scale keeps: result, blend sums, content (2), start


def _activation_bytes(net: nn.Sequential, width: int, height: int, deepest: str, amp: bool) -> int:
    last = layer_index(deepest, vgg_layers(net))
    elems, h, w = 0, height, width
    for m in list(net)[: last + 1]:
        if isinstance(m, nn.Conv2d):
            elems += m.out_channels * h * w
        elif isinstance(m, nn.MaxPool2d):
            h, w = h // 2, w // 2
    return elems * (2 if amp else 4)


def estimate_memory(
    net: nn.Sequential,
    width: int,
    height: int,
    *,
    amp: bool = False,
    optimizer: str = "lbfgs",
    history_size: int = 50,
    deepest: str = "relu5_1",
    batch: int = 1,
    steps: int | None = None,
    device: str = "cpu",
) -> int:
    """Peak bytes, beyond the loaded engine, of a run of ``batch`` images of ``width`` x ``height``
    on a ``device`` type (see the module docstring for the model and its calibration)."""
    factor, constant = CALIBRATION.get(device, CALIBRATION["cuda"])
    image = 3 * width * height * 4
    used = min(history_size, steps) if steps else history_size
    opt_state = (2 * used + 4) * image if optimizer == "lbfgs" else 4 * image
    act = _activation_bytes(net, width, height, deepest, amp)
    return int(batch * (factor * act + opt_state + _BUFFERS * image) + constant)


def estimate_tiled(net: nn.Sequential, width: int, height: int, tile: int, **kw: object) -> int:
    """Peak bytes of a run whose scales above ``tile`` px are optimised tile by tile: one tile's
    step (a ``tile`` x ``tile`` window at most) plus the full-size tensors the scale keeps."""
    side = min(tile, max(width, height))
    tw, th = min(width, side), min(height, side)
    batch = int(kw.get("batch", 1))  # type: ignore[arg-type]
    return estimate_memory(net, tw, th, **kw) + batch * _TILED_BUFFERS * 3 * width * height * 4  # type: ignore[arg-type]


def estimate_run(
    rt: Runtime,
    width: int,
    height: int,
    *,
    tile: int | None = None,
    style_loss: str = "gram",
    **kw: object,
) -> int:
    """:func:`estimate_memory` (or, with ``tile`` below the long side, :func:`estimate_tiled`) on
    the engine's network and device; plus what the style loss keeps beyond the model
    (:attr:`nstcam.style.losses.StyleLoss.extra_bytes`) for the default style layers."""
    kw = {"amp": rt.amp, "device": rt.device.type, **kw}
    from nstcam.style._plan import DEFAULT_STYLE_LAYERS

    extra = style_loss_named(style_loss).extra_bytes(width, height, DEFAULT_STYLE_LAYERS, 1.0, tile)
    if tile is not None and max(width, height) > tile:
        return estimate_tiled(rt.net, width, height, tile, **kw) + extra
    return estimate_memory(rt.net, width, height, **kw) + extra  # type: ignore[arg-type]


def check_memory(rt: Runtime, plan: Plan, content: Image.Image, batch: int = 1) -> None:
    """Refuses a run that would not fit in free memory, or (``on_memory="reduce"``) tiles it (when
    no tile was asked for) or shrinks ``plan`` until it fits. Concurrent runs each see the memory
    that is free when they start."""
    free = available_memory(rt.device)
    if free is None:
        return
    need = _need(rt, plan, content, batch)

    budget = int(free * 0.9)
    if need(plan.size, plan.tile) <= budget:
        return
    msg = (
        f"{plan.size} px{f' in tiles of {plan.tile} px' if plan.tile else ''} needs about "
        f"{need(plan.size, plan.tile) / 2**30:.1f} GiB on {rt.device.type}, {free / 2**30:.1f} GiB is free"
    )
    masked = plan.extra.get("style_masks") or (
        plan.extra.get("style_mask") and plan.extra["mask_mode"] == "optimize"
    )
    if plan.tile is None and plan.extra["on_memory"] == "reduce" and not masked:
        tile = _largest_tile(plan, need, budget)
        if tile is not None:
            logger.warning("%s: optimising in tiles of %d px", msg, tile)
            plan.tile = tile
            plan.tile_overlap = min(plan.tile_overlap, tile // 4)
            return
    fits = plan.size
    while fits > 16 and need(fits, plan.tile) > budget:
        fits = int(fits * 0.9)
    msg += f"; use size={fits} or less" + ("" if plan.tile else ", or tile=512")
    if plan.extra["on_memory"] == "error" or fits <= 16:
        raise InsufficientMemoryError(msg)
    logger.warning("%s: reducing to %d px", msg, fits)
    ratio = fits / plan.size
    plan.scales = [max(16, int(s * ratio)) for s in plan.scales]
    plan.size = plan.scales[-1]


def _need(rt: Runtime, plan: Plan, content: Image.Image, batch: int):
    """``need(long_side, tile)``: the run's estimated bytes at that size and tile."""
    kw = dict(
        optimizer=plan.optimizer,
        history_size=plan.history_size,
        deepest=deepest_layer(plan.layers),
        batch=batch,
        steps=max(plan.steps),
    )

    def need(long_side: int, tile: int | None) -> int:
        size = long_side_size(content.size, long_side)
        extra = style_loss_named(plan.style_loss).extra_bytes(
            *size, plan.style_layers, plan.style_scale, tile
        )
        return estimate_run(rt, *size, tile=tile, **kw) + extra

    return need


def print_tile(rt: Runtime, plan: Plan, content: Image.Image, batch: int = 1) -> None:
    """A print's plan (``plan.extra["print_from"]``) with no tile asked: where the untiled run is
    estimated past :data:`PRINT_MEMORY`, its scales past the preview go in the largest tile (2048,
    1024 or 512 px, not below the preview's side) that keeps under it, else the preview's side; said
    in one log line and recorded in the plan (``tile``). The caller checks that tiles combine with
    the run (no style per region, no style mask optimised in place, no start image or anchors)."""
    side = plan.extra.get("print_from")
    if plan.tile is not None or not side:
        return
    need = _need(rt, plan, content, batch)
    untiled = need(plan.size, None)
    if untiled <= PRINT_MEMORY:
        return
    fits = [t for t in (2048, 1024, 512) if side <= t < plan.size and need(plan.size, t) <= PRINT_MEMORY]
    plan.tile = fits[0] if fits else side
    plan.tile_overlap = min(plan.tile_overlap, plan.tile // 4)
    logger.info(
        "a %d px print needs about %.1f GiB untiled: its scales past %d px are optimised in tiles of %d px",
        plan.size,
        untiled / 2**30,
        side,
        plan.tile,
    )


def _largest_tile(plan: Plan, need, budget: int) -> int | None:
    """The largest power-of-two tile (2048 down to 128 px) with which the run fits, if any."""
    for tile in (2048, 1024, 512, 256, 128):
        if tile < plan.size and need(plan.size, tile) <= budget:
            return tile
    return None
