"""Will a run fit? A rough peak-memory model of one optimisation step, and the check before a run."""

from __future__ import annotations

import logging

from PIL import Image
from torch import nn

from nstcam._device import available_memory
from nstcam.image import long_side_size
from nstcam.style._plan import Plan
from nstcam.style._runtime import Runtime
from nstcam.style._types import InsufficientMemoryError
from nstcam.style.vgg import deepest_layer, layer_index

__all__ = ["check_memory", "estimate_memory"]

logger = logging.getLogger(__name__)


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
) -> int:
    """Rough peak bytes of one optimisation step of ``batch`` images of ``width`` x ``height``
    (activations kept for backward, their gradients, optimiser state, weights)."""
    last = layer_index(deepest)
    elems, h, w, c = 0, height, width, 3
    for m in list(net)[: last + 1]:
        if isinstance(m, nn.Conv2d):
            c = m.out_channels
            elems += c * h * w * 2  # conv output (+ its saved copy for backward)
        elif isinstance(m, nn.MaxPool2d):
            elems += c * h * w * 2  # input saved + int64 indices (counted as two floats)
            h, w = h // 2, w // 2
    act_bytes = 2 if amp else 4
    image = 3 * width * height * 4
    opt_state = (2 * history_size + 4) * image if optimizer == "lbfgs" else 4 * image
    weights = sum(p.numel() * p.element_size() for p in net.parameters())
    return int(batch * (elems * act_bytes * 1.5 + opt_state) + weights)


def check_memory(rt: Runtime, plan: Plan, content: Image.Image, batch: int = 1) -> None:
    """Refuses a run that would not fit in free memory, or (``on_memory="reduce"``) shrinks ``plan``
    until it fits. Concurrent runs each see the memory that is free when they start."""
    free = available_memory(rt.device)
    if free is None:
        return
    deepest = deepest_layer(plan.layers)

    def need(long_side: int) -> int:
        w, h = long_side_size(content.size, long_side)
        return estimate_memory(
            rt.net,
            w,
            h,
            amp=rt.amp,
            optimizer=plan.optimizer,
            history_size=plan.history_size,
            deepest=deepest,
        )

    budget = int(free * 0.9)
    if need(plan.size) <= budget:
        return
    fits = plan.size
    while fits > 16 and need(fits) > budget:
        fits = int(fits * 0.9)
    msg = (
        f"{plan.size} px needs about {need(plan.size) / 2**30:.1f} GiB on {rt.device.type}, "
        f"{free / 2**30:.1f} GiB is free; use size={fits} or less"
    )
    if plan.extra["on_memory"] == "error" or fits <= 16:
        raise InsufficientMemoryError(msg)
    logger.warning("%s: reducing to %d px", msg, fits)
    ratio = fits / plan.size
    plan.scales = [max(16, int(s * ratio)) for s in plan.scales]
    plan.size = plan.scales[-1]
