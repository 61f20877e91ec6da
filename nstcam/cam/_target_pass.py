"""The pass for target objects (:mod:`nstcam.cam.targets`): any model output, one target per image.

A classifier's class indices take the engine's own passes (captured in CUDA graphs, batched top-k).
A target object reads whatever the model returns (a segmenter's ``{"out": ...}`` reads as its
tensor), scores each image, and differentiates the sum once: one forward pass to the end, one
backward pass stopped at the target layer, as for a class.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from nstcam.cam.hooks import CamHooks
from nstcam.cam.methods import (
    GRADIENT_METHODS,
    cam_from_weights,
    eigencam,
    fem_weights,
    gradient_map,
    kernel_pca,
)
from nstcam.cam.targets import Target
from nstcam.layouts import detect_layout, to_nchw

__all__ = ["TARGET_METHODS", "model_kind", "model_output", "target_pass"]

TARGET_METHODS = (*GRADIENT_METHODS, "eigencam", "fem", "kpcacam")
"""Methods that explain target objects (gradient methods, and gradient-free ones that need none)."""


def model_kind(model: nn.Module) -> str:
    """``"detector"``, ``"segmenter"`` or ``"classifier"`` (which also gives embeddings), from the
    model's torchvision family."""
    from torchvision.models import detection, segmentation
    from torchvision.models.detection.generalized_rcnn import GeneralizedRCNN
    from torchvision.models.detection.ssd import SSD

    if isinstance(model, (GeneralizedRCNN, detection.RetinaNet, detection.FCOS, SSD)):
        return "detector"
    if isinstance(model, (segmentation.LRASPP, segmentation.DeepLabV3, segmentation.FCN)):
        return "segmenter"
    return "classifier"


def model_output(out: Any) -> Any:
    """What targets read: a segmenter's ``"out"`` tensor, else the output as the model gives it."""
    if isinstance(out, dict) and "out" in out:
        return out["out"]
    return out


def target_pass(
    model: nn.Module,
    layer: str,
    method: str,
    x: torch.Tensor,
    targets: Sequence[Target],
    layout: str | None = None,
    *,
    eigen_smooth: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(raw maps (1, N, h, w) after ReLU, each image's target score (N,)) for ``targets[i]`` of image i.

    Raises:
        ValueError: the layer's output is not one 3- or 4-D tensor, or a target does not fit the
            model's output (its own message).
    """
    in_h, in_w = x.shape[-2:]
    gradient = method in GRADIENT_METHODS
    with torch.inference_mode(False), torch.no_grad(), CamHooks(model, layer) as hooks:
        out = model_output(model(x))  # grad mode switches on at the target layer
        if hooks.outputs.get(layer) is None:
            raise RuntimeError(f"layer {layer!r} did not run in the forward pass")
        act = hooks.activation
        if not isinstance(act, torch.Tensor) or act.ndim not in (3, 4):
            raise ValueError(
                f"layer {layer!r} outputs {type(act).__name__}; CAM reads one (N, C, h, w), (N, h, w, C) "
                "or (N, tokens, C) tensor: choose another layer"
            )
        layout = layout or detect_layout(tuple(act.shape), in_h, in_w)
        a = to_nchw(act.detach().float(), layout, in_h, in_w)
        with torch.enable_grad():
            scores = torch.stack([t(out, i).reshape(()) for i, t in enumerate(targets)])
            if gradient and scores.requires_grad:
                torch.autograd.grad(scores.sum(), act, allow_unused=True)
        if gradient:
            g = hooks.grads.get(layer)
            g = torch.zeros_like(act) if g is None else g  # a score the layer does not reach: no map
            raw = gradient_map(method, a, to_nchw(g.float(), layout, in_h, in_w), eigen_smooth)
        elif method == "fem":
            raw = cam_from_weights(a, fem_weights(a), eigen_smooth)
        else:
            raw = torch.relu(eigencam(a) if method == "eigencam" else kernel_pca(a))
    return raw[None], scores.detach().float()
