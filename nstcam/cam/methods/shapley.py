"""ShapleyCAM (Cai et al. 2025): the gradient and the Hessian-vector product of the score with
respect to the activation, by a double backward through the layers above the target layer."""

from __future__ import annotations

import torch
from torch import nn

from nstcam.cam._attention import with_math_attention
from nstcam.cam._request import Outputs, Request
from nstcam.cam.hooks import CamHooks
from nstcam.cam.methods.combine import combine, grid_dims, weighted
from nstcam.hooks import twin
from nstcam.layouts import detect_layout, input_grid, to_nchw

__all__ = ["shapley_terms", "shapleycam_pass"]


def shapley_terms(a: torch.Tensor, g: torch.Tensor, hvp: torch.Tensor) -> torch.Tensor:
    """Weights ``mean_ij(g - H A / 2)``, with ``H A`` the Hessian-vector product of the score with
    respect to the activation, along the activation."""
    return weighted(a, (g - 0.5 * hvp).mean(dim=grid_dims(g)))


def shapleycam_pass(req: Request) -> Outputs:
    """ShapleyCAM: the gradient and the Hessian-vector product ``H A`` of the score with respect to
    the activation, by a double backward through the layers above the target layer only."""
    x, grid = req.x, input_grid(req.x)
    net = twin(req.model)
    handles = with_math_attention(net)  # fused attention kernels have no second derivative
    try:
        return _shapley(req, net, x, grid)
    except RuntimeError as e:  # torch lacks a second derivative of some op (hardsigmoid: MobileNetV3)
        if "derivative for" not in str(e) or "not implemented" not in str(e):
            raise
        op = str(e).split("derivative for ")[1].split(" is not")[0]
        raise ValueError(
            f"method 'shapleycam' needs second derivatives, and torch has none for {op}, which this model "
            "uses above the layer: use gradcam or another gradient method"
        ) from e
    finally:
        for h in handles:
            h.remove()


def _shapley(req: Request, net: nn.Module, x: torch.Tensor, grid: tuple[int, ...]) -> Outputs:
    with torch.inference_mode(False), torch.no_grad(), CamHooks(net, req.layer) as hooks:
        logits = net(x)
        act = hooks.checked_activation(logits)
        layout = req.layout or detect_layout(tuple(act.shape), *grid)
        a = to_nchw(act.detach().float(), layout, *grid)
        classes = req.classes(logits)
        raws = []
        for j in range(classes.shape[0]):
            last = j == classes.shape[0] - 1
            with torch.enable_grad():
                y = logits.gather(1, classes[j].view(-1, 1)).sum()
                (g,) = torch.autograd.grad(y, act, create_graph=True)
                if g.requires_grad:  # else the score is linear in the activation: H A = 0
                    (hvp,) = torch.autograd.grad(
                        g, act, grad_outputs=act.detach(), retain_graph=not last, allow_unused=True
                    )
                else:
                    hvp = None
            hvp = torch.zeros_like(act) if hvp is None else hvp
            gn, hn = (to_nchw(t.detach().float(), layout, *grid) for t in (g, hvp))
            raws.append(torch.relu(combine(shapley_terms(a, gn, hn), req.eigen_smooth)))
    return torch.stack(raws), logits.detach().float().softmax(1), classes
