"""Maps for target objects with every method that takes one: the one-pass methods
(:func:`nstcam.cam.targets.one_pass.target_pass`) and the perturbation ones, Score-CAM, SS-CAM, IS-CAM and
AblationCAM, which score the model's output on changed inputs (or a changed layer) with the target.

A perturbation pass scores all of an image's targets on each changed copy, so k targets of an
image (a detector's k boxes) cost the forward passes of one. Each method's channel weights are its
own (its record's ``target_weights``, in :mod:`nstcam.cam.methods.perturbation`): here, the one
hooked pass, the targets' scores on the unchanged images, the progress, and the maps.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from nstcam.cam._maps import model_output
from nstcam.cam._request import TargetRequest
from nstcam.cam.methods import cam_from_weights
from nstcam.cam.registry import method as method_record
from nstcam.cam.targets.objects import Target
from nstcam.cam.targets.one_pass import reader, target_pass
from nstcam.hooks import HookManager
from nstcam.layouts import input_grid

__all__ = ["TargetOptions", "target_maps"]

Rows = Callable[[Any], Sequence[Sequence[Target]]]


@dataclass(frozen=True)
class TargetOptions:
    """The engine's settings a pass may need: masked images per forward pass, the seed of its random
    numbers, SS-CAM/IS-CAM samples and noise, and ``progress(done, total)``."""

    chunk: int = 32
    seed: int = 0
    n_samples: int | None = None
    std: float | None = None
    progress: Callable[[int, int], None] | None = None


def target_maps(
    model: nn.Module,
    layer: str,
    method: str,
    x: torch.Tensor,
    rows: Rows,
    layout: str | None = None,
    *,
    eigen_smooth: bool = False,
    options: TargetOptions = TargetOptions(),
) -> tuple[torch.Tensor, torch.Tensor, Any]:
    """(raw maps (k, N, h, w), target scores (k, N), the detached output) for the targets ``rows``
    picks from the model's output, with ``method``."""
    if method_record(method).targets != "perturbation":
        return target_pass(
            model, layer, method, x, rows, layout, eigen_smooth=eigen_smooth, seed=options.seed
        )
    record = method_record(method)
    with torch.inference_mode(False), torch.no_grad(), HookManager(model, [layer], detach=True) as hooks:
        out = model_output(model(x))
        native = hooks.outputs.get(layer)
    if native is None:
        raise RuntimeError(f"layer {layer!r} did not run in the forward pass")
    a, _ = reader(native, layer, layout, *input_grid(x))
    chosen = [list(row) for row in rows(out)]
    n, c = a.shape[:2]
    if not chosen:
        return a.new_zeros(0, n, *a.shape[2:]), a.new_zeros(0, n), out
    base = torch.stack(
        [torch.stack([t(out, i).reshape(()).float() for i, t in enumerate(row)]) for row in chosen]
    )
    samples = (options.n_samples or record.samples) if record.samples > 1 else 1
    done = _Counter(options.progress, n * c * samples)
    req = TargetRequest(
        model,
        layer,
        layout,
        x,
        native,
        a,
        chosen,
        base,
        options.chunk,
        options.seed,
        options.n_samples,
        options.std,
        done,
    )
    with torch.inference_mode(False), torch.no_grad():
        weights = record.target_weights(req)  # (k, N, C)
    raws = torch.stack([cam_from_weights(a, weights[j], eigen_smooth) for j in range(len(chosen))])
    return raws, base, out


class _Counter:
    def __init__(self, progress: Callable[[int, int], None] | None, total: int) -> None:
        self.progress, self.total, self.done = progress, total, 0

    def __call__(self, m: int) -> None:
        self.done += m
        if self.progress is not None:
            self.progress(self.done, self.total)
