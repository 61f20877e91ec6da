"""FullGrad (Srinivas & Fleuret 2019): the input gradient times the input, plus every bias gradient
times its bias, each channel min-max scaled and summed at the input's size.

The biases are those of ``nn.Conv2d`` and ``nn.BatchNorm2d`` layers (BatchNorm's effective bias in
eval mode, ``beta - mean * gamma / sqrt(var + eps)``), as pytorch-grad-cam takes them. The gradients
come from tensor hooks on the outputs of a private twin of the network (a hook registered before an
in-place ReLU receives the gradient of the value the layer produced), so the shared model gets no
hook. Unlike the CAM methods, FullGrad needs the whole backward pass, down to the input.

Bilinear upsampling is linear and the same for every channel, so a layer's channels are scaled at
the layer's resolution, summed, and upsampled once (equal to upsampling each channel, at a fraction
of the memory).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from nstcam.cam._maps import minmax
from nstcam.cam._request import Outputs, Request
from nstcam.hooks import twin

__all__ = ["bias_layers", "check_fullgrad", "fullgrad_pass"]


def bias_layers(model: nn.Module) -> list[tuple[nn.Module, torch.Tensor]]:
    """(module, bias) for every Conv2d and BatchNorm2d with a bias, BatchNorm's effective bias; their
    subclasses too (timm's ``BatchNormAct2d``, ``Conv2dSame``), read at their output as
    pytorch-grad-cam reads them."""
    found = []
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d) and m.bias is not None:
            if m.running_mean is None or m.running_var is None:
                bias = m.bias.detach()
            else:
                bias = m.bias.detach() - m.running_mean * m.weight.detach() / torch.sqrt(
                    m.running_var + m.eps
                )
            found.append((m, bias))
        elif isinstance(m, nn.Conv2d) and m.bias is not None:
            found.append((m, m.bias.detach()))
    return found


def check_fullgrad(model: nn.Module, layers: object, method: str) -> None:
    """Refuses a model without a bias to read, before any work."""
    if not bias_layers(model):
        raise ValueError(
            f"method 'fullgrad' sums bias gradients of Conv2d and BatchNorm2d layers, and this "
            f"{type(model).__name__} has none with a bias (its {_count(model)}): use method='gradcam'"
        )


def _count(model: nn.Module) -> str:
    """What the model has instead, for the refusal: its Conv2d and BatchNorm2d counts."""
    convs = sum(isinstance(m, nn.Conv2d) for m in model.modules())
    norms = sum(isinstance(m, nn.BatchNorm2d) for m in model.modules())
    return f"{convs} Conv2d without a bias, {norms} BatchNorm2d without one"


def _scaled(t: torch.Tensor) -> torch.Tensor:
    """pytorch-grad-cam's per-map scaling over the last two dims (eps 1e-7)."""
    return minmax(t, (-2, -1), 1e-7)


def fullgrad_pass(req: Request) -> Outputs:
    """FullGrad's raw maps (k, N, H, W) at the input's size."""
    net = twin(req.model)
    layers = bias_layers(net)
    if not layers:
        raise ValueError(
            "method 'fullgrad' sums bias gradients, and this model has no Conv2d or BatchNorm2d with a "
            "bias: use method='gradcam'"
        )
    grads: dict[int, torch.Tensor] = {}

    def keep(i: int):
        def hook(_m: nn.Module, _inputs: object, out: torch.Tensor) -> None:
            if isinstance(out, torch.Tensor) and out.requires_grad:
                out.register_hook(lambda g: grads.__setitem__(i, g))

        return hook

    handles = [m.register_forward_hook(keep(i)) for i, (m, _) in enumerate(layers)]
    try:
        x = req.x.detach().clone().requires_grad_()
        size = x.shape[-2:]
        with torch.inference_mode(False), torch.enable_grad():
            logits = net(x)
            classes = req.classes(logits.detach())
            raws = []
            for j in range(classes.shape[0]):
                grads.clear()
                y = logits.gather(1, classes[j].view(-1, 1)).sum()
                (gx,) = torch.autograd.grad(y, x, retain_graph=j < classes.shape[0] - 1)
                total = _scaled((gx * x).abs().float()).sum(dim=1)
                for i, (_, bias) in enumerate(layers):
                    if i not in grads:
                        continue  # a layer the score does not depend on
                    g = grads[i].float()
                    part = _scaled((bias.float()[None, :, None, None] * g).abs()).sum(dim=1, keepdim=True)
                    total = total + F.interpolate(part, size=size, mode="bilinear", align_corners=False)[:, 0]
                raws.append(total.detach())
    finally:
        for h in handles:
            h.remove()
    return torch.stack(raws), logits.detach().float().softmax(1), classes
