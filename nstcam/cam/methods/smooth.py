"""Smooth Grad-CAM++ (Omeiza et al. 2019): Grad-CAM++ from gradients averaged over noisy inputs."""

from __future__ import annotations

import torch

from nstcam.cam._maps import hooked_pass
from nstcam.cam._request import Outputs, Request
from nstcam.cam.hooks import CamHooks
from nstcam.cam.methods.combine import cam_from_weights
from nstcam.cam.methods.gradient import gradcam_pp_weights
from nstcam.layouts import detect_layout, input_grid, to_nchw

__all__ = ["smoothgradcampp_pass"]


def smoothgradcampp_pass(req: Request) -> Outputs:
    """Smooth Grad-CAM++ (Omeiza et al. 2019): Grad-CAM++'s alpha and weights from the first, second
    and third powers of the gradients averaged over ``n_samples`` inputs with Gaussian noise
    (``std``, normalised input units), applied to the clean activation. The noise is drawn per
    sample as ``std * randn(x.shape)`` from the call's generator; the noisy copies run as batches of
    up to ``chunk`` images."""
    n, std = req.n_samples or 4, 0.3 if req.std is None else req.std
    x, grid = req.x, input_grid(req.x)
    _, native, classes, probs = hooked_pass(req.model, req.layer, x, req.classes)
    layout = req.layout or detect_layout(tuple(native.shape), *grid)
    a = to_nchw(native.float(), layout, *grid)
    k, b = classes.shape[0], x.shape[0]
    sums = [[torch.zeros_like(a) for _ in range(3)] for _ in range(k)]
    gen = req.generator()
    noise = [std * torch.randn(x.shape, generator=gen, device=x.device, dtype=x.dtype) for _ in range(n)]
    group = max(1, req.chunk // b)  # noisy copies per forward pass: several at once, as one batch
    for lo in range(0, n, group):
        part = noise[lo : lo + group]
        noisy = torch.cat([x + e for e in part])
        rows = classes.repeat(1, len(part))  # (k, len(part) * N)
        with torch.inference_mode(False), torch.no_grad(), CamHooks(req.model, req.layer) as hooks:
            out = req.model(noisy)
            act = hooks.checked_activation(out)
            for j in range(k):
                with torch.enable_grad():
                    y = out.gather(1, rows[j].view(-1, 1)).sum()
                    torch.autograd.grad(y, act, retain_graph=j < k - 1)
                g = to_nchw(hooks.gradient.float(), layout, *grid).reshape(len(part), b, *a.shape[1:])
                for p, acc in enumerate(sums[j], start=1):
                    acc.add_(g.pow(p).sum(0))
    raws = []
    for j in range(k):
        g1, g2, g3 = (t / n for t in sums[j])
        raws.append(cam_from_weights(a, gradcam_pp_weights(a, g1, g2, g3), req.eigen_smooth))
    return torch.stack(raws), probs, classes
