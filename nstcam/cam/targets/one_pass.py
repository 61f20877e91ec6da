"""The pass for target objects (:mod:`nstcam.cam.targets`): any model output, one target per image.

A classifier's class indices take the engine's own passes (captured in CUDA graphs, batched top-k).
A target object reads whatever the model returns (a segmenter's ``{"out": ...}`` reads as its
tensor), scores each image, and differentiates the sum once: one forward pass to the end, one
backward pass stopped at the target layer, as for a class.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import nullcontext
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from nstcam.cam._maps import model_output
from nstcam.cam.hooks import CamHooks
from nstcam.cam.registry import method as method_record
from nstcam.cam.targets.objects import Target
from nstcam.cam.targets.shortcuts import shortcut
from nstcam.layouts import detect_layout, input_grid, to_nchw

__all__ = ["levels_as_one", "model_output", "reader", "target_pass"]


def levels_as_one(levels: dict[str, torch.Tensor]) -> torch.Tensor:
    """A dict of (N, C, h, w) levels (an FPN's) as one (N, sum C, h, w) tensor on the finest level's
    grid: each level resized bilinearly and its channels kept apart, so that channel weights (and a
    principal component) read every level at the resolution of the sharpest."""
    tensors = [v.detach().float() for v in levels.values()]
    h, w = max((t.shape[-2:] for t in tensors), key=lambda s: s[0] * s[1])
    return torch.cat([_resized(t, h, w) for t in tensors], dim=1)


def _resized(t: torch.Tensor, h: int, w: int) -> torch.Tensor:
    return (
        t if t.shape[-2:] == (h, w) else F.interpolate(t, size=(h, w), mode="bilinear", align_corners=False)
    )


def target_pass(
    model: nn.Module,
    layer: str,
    method: str,
    x: torch.Tensor,
    rows: Callable[[Any], Sequence[Sequence[Target]]],
    layout: str | None = None,
    *,
    eigen_smooth: bool = False,
    seed: int = 0,
) -> tuple[torch.Tensor, torch.Tensor, Any]:
    """Maps for targets picked from the model's own output, in one forward pass (RandomCAM: random
    channel weights from ``seed``).

    ``rows(output)`` gives k rows of one target per image (a detector's k boxes, a segmenter's k
    classes, found in the same pass); each row costs one backward pass, stopped at the layer.

    Returns:
        (raw maps (k, N, h, w) after ReLU, target scores (k, N), the output, detached).

    Raises:
        ValueError: the layer's output is not one 3- or 4-D tensor or a dict of levels, or a target
            does not fit the model's output (its own message).
    """
    grid = input_grid(x)
    record = method_record(method)
    gradient = record.formula is not None
    with torch.inference_mode(False), torch.no_grad(), CamHooks(model, layer) as hooks:
        short = shortcut(model, layer) if gradient else None
        with short or nullcontext():
            out = model(x)  # grad mode switches on at the target layer
            out = model_output(out if short is None else short.rebuild(out, x))  # same values, cheaper graph
        if hooks.outputs.get(layer) is None:
            raise RuntimeError(f"layer {layer!r} did not run in the forward pass")
        act = hooks.activation
        a, read = reader(act, layer, layout, *grid)
        leaves = list(act.values()) if isinstance(act, dict) else [act]
        chosen = rows(_detached(out))
        raws, scores = [], []
        for j, row in enumerate(chosen):
            hooks.grads.pop(layer, None)  # a level this row does not reach must not keep the last row's
            with torch.enable_grad():
                y = torch.stack([t(out, i).reshape(()) for i, t in enumerate(row)])
                if gradient and y.requires_grad:
                    torch.autograd.grad(y.sum(), leaves, allow_unused=True, retain_graph=j < len(chosen) - 1)
            scores.append(y.detach().float())
            if gradient:
                raws.append(record.formula.map(a, read(hooks.grads.get(layer)), eigen_smooth))
            else:  # a map of the activation alone (RandomCAM's weights from the row's own seed)
                gen = torch.Generator(device=a.device).manual_seed(seed + j)
                raws.append(record.activation(a, eigen_smooth, gen))
    if not raws:
        n = x.shape[0]
        return a.new_zeros(0, n, *a.shape[2:]), a.new_zeros(0, n), _detached(out)
    return torch.stack(raws), torch.stack(scores), _detached(out)


def reader(act: Any, layer: str, layout: str | None, *size: int):
    """(the activation as (N, C, *grid) for an input of grid ``size``, a function reading a gradient
    the same way: None -> zeros)."""
    if isinstance(act, dict):

        def read_levels(g: Any) -> torch.Tensor:
            return levels_as_one({k: (g or {}).get(k, torch.zeros_like(v)) for k, v in act.items()})

        return levels_as_one(act), read_levels
    if not isinstance(act, torch.Tensor) or act.ndim not in (3, 4, 5):
        raise ValueError(
            f"layer {layer!r} outputs {type(act).__name__}; CAM reads one (N, C, [t,] h, w), "
            "(N, [t,] h, w, C) or (N, tokens, C) tensor, or a dict of (N, C, h, w) levels: choose "
            "another layer"
        )
    layout = layout or detect_layout(tuple(act.shape), *size)
    if layout == "nchw" and act.ndim == 4:  # as it is (a detector's grid is of the input it resized)

        def read_grid(g: Any) -> torch.Tensor:
            return (torch.zeros_like(act) if g is None else g).float()

        return act.detach().float(), read_grid

    def read(g: Any) -> torch.Tensor:
        return to_nchw((torch.zeros_like(act) if g is None else g).float(), layout, *size)

    return to_nchw(act.detach().float(), layout, *size), read


def _detached(out: Any) -> Any:
    if isinstance(out, torch.Tensor):
        kept = out.detach()
        if hasattr(out, "low_res"):  # a segmenter's logits before upsampling (cam/targets/shortcuts.py)
            kept.low_res = out.low_res.detach()
        return kept
    if isinstance(out, dict):
        return {k: _detached(v) for k, v in out.items()}
    if isinstance(out, (list, tuple)):
        return type(out)(_detached(v) for v in out)
    return out
