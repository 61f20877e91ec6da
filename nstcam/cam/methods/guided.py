"""Guided backpropagation (Springenberg et al. 2015) and Guided Grad-CAM (Selvaraju et al. 2017).

Guided backpropagation lets a ReLU pass back only positive gradients where its input was positive
(a ReLU6: where it is not flat, 0 < x < 6). The ReLUs (``nn.ReLU``, ``nn.ReLU6`` and subclasses)
are swapped for guided ones in a private twin of the network (its own module tree over the same
parameters), so another thread's pass through the shared model stays unguided. ReLUs called as
functions (``F.relu``) stay plain, as in pytorch-grad-cam. The map is the largest absolute input
gradient over the colour channels, at the input's size.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from nstcam.cam._graphed import gradient_pass
from nstcam.cam._maps import normalize_maps
from nstcam.cam._request import Outputs, Request
from nstcam.cam.methods.gradient import GRADCAM
from nstcam.hooks import twin

__all__ = [
    "GUIDED",
    "GuidedReLU",
    "GuidedReLU6",
    "check_guided",
    "guided_backprop_pass",
    "guided_gradcam_pass",
    "has_relu",
]


class _GuidedReLUFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: torch.Tensor) -> torch.Tensor:
        out = x.clamp(min=0)
        ctx.save_for_backward(out)
        return out

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:
        (out,) = ctx.saved_tensors
        return grad * ((out > 0) & (grad > 0)).to(grad.dtype)


class _GuidedReLU6Fn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(x)
        return x.clamp(0, 6)

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:
        (x,) = ctx.saved_tensors
        return grad * ((x > 0) & (x < 6) & (grad > 0)).to(grad.dtype)


class GuidedReLU(nn.Module):
    """A ReLU whose backward passes only positive gradients where its output is positive."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _GuidedReLUFn.apply(x)


class GuidedReLU6(nn.Module):
    """A ReLU6 whose backward passes only positive gradients where it is not flat (0 < x < 6)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _GuidedReLU6Fn.apply(x)


GUIDED = ((nn.ReLU, GuidedReLU), (nn.ReLU6, GuidedReLU6))
"""The activation modules guided backpropagation guides (subclasses too), and their guided twins."""


def _guided_for(m: nn.Module) -> nn.Module | None:
    for kind, guided in GUIDED:
        if isinstance(m, kind):
            return guided()
    return None


def has_relu(model: nn.Module) -> bool:
    """Whether ``model`` has a module to guide (``nn.ReLU``, ``nn.ReLU6`` or a subclass)."""
    return any(_guided_for(m) is not None for m in model.modules())


def _activations(model: nn.Module) -> str:
    """The model's activation modules by type, for a refusal: ``"33 SiLU, 1 GELU"``."""
    counts: dict[str, int] = {}
    for m in model.modules():
        name = type(m).__name__
        if m.__class__.__module__.startswith("torch.nn.modules.activation") or name.endswith(("LU", "Act")):
            counts[name] = counts.get(name, 0) + 1
    return ", ".join(f"{n} {k}" for k, n in sorted(counts.items(), key=lambda kv: -kv[1])) or "none"


def check_guided(model: nn.Module, layers: object, method: str) -> None:
    """Refuses a model with no ReLU or ReLU6 module to guide, before any work."""
    if not has_relu(model):
        raise ValueError(
            f"method {method!r} guides ReLU and ReLU6 modules, and this {type(model).__name__} has none "
            f"(its activation modules: {_activations(model)}; a ReLU called as F.relu cannot be guided): "
            "use method='layercam' or 'fullgrad'"
        )


def _guided_twin(model: nn.Module) -> nn.Module:
    net = twin(model)
    stack = [net]
    while stack:
        m = stack.pop()
        for name, child in m._modules.items():
            guided = None if child is None else _guided_for(child)
            if guided is not None:
                m._modules[name] = guided  # the twin's own table: the shared model is untouched
            elif child is not None:
                stack.append(child)
    return net


def _guided_gradients(req: Request) -> tuple[list[torch.Tensor], torch.Tensor, torch.Tensor]:
    check_guided(req.model, None, "guidedbackprop")
    net = _guided_twin(req.model)
    x = req.x.detach().clone().requires_grad_()
    with torch.inference_mode(False), torch.enable_grad():
        logits = net(x)
        classes = req.classes(logits.detach())
        grads = []
        for j in range(classes.shape[0]):
            y = logits.gather(1, classes[j].view(-1, 1)).sum()
            (gx,) = torch.autograd.grad(y, x, retain_graph=j < classes.shape[0] - 1)
            grads.append(gx.detach().float())
    return grads, logits.detach().float().softmax(1), classes


def guided_backprop_pass(req: Request) -> Outputs:
    """Guided backpropagation: (k, N, H, W) maps, the largest |gradient| over colour channels."""
    grads, probs, classes = _guided_gradients(req)
    return torch.stack([g.abs().amax(dim=1) for g in grads]), probs, classes


def guided_gradcam_pass(req: Request) -> Outputs:
    """Guided Grad-CAM: the guided gradients times the Grad-CAM map upsampled to the input's size
    (then the largest absolute value over colour channels)."""
    grads, probs, classes = _guided_gradients(req)
    fixed = classes  # Grad-CAM for the same classes

    raws, _, _ = gradient_pass(req.model, req.layer, GRADCAM, req.x, lambda _logits: fixed, req.layout)
    size = req.x.shape[-2:]
    out = []
    for j, g in enumerate(grads):
        cam = F.interpolate(
            normalize_maps(raws[j]).unsqueeze(1), size=size, mode="bilinear", align_corners=False
        )
        out.append((g * cam).abs().amax(dim=1))
    return torch.stack(out), probs, classes
