"""Whole calls of the methods that are not one plain gradient pass: one request in, raw maps out.

Every pass takes a :class:`Request` and returns ``(raws (k, N, h, w), probs (N, classes), classes
(k, N))``: the raw maps after ReLU at the layer's (or the input's) resolution, one row per class
explained. Randomness (RandomCAM, Smooth Grad-CAM++, SS-CAM) comes from a generator seeded per call,
so a call is reproducible and never touches the global random state another thread may use.
Networks altered for a method (guided ReLUs, LeGrad's attention) are private twins: the shared model
is never changed (see :func:`nstcam.hooks.twin`).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from nstcam.cam._attention import with_math_attention
from nstcam.cam._fullgrad import fullgrad_pass
from nstcam.cam._graphed import gradient_pass
from nstcam.cam._guided import guided_backprop_pass, guided_gradcam_pass
from nstcam.cam._legrad import legrad_pass
from nstcam.cam._maps import ablationcam_pass, hooked_pass, minmax, read_nchw, scorecam_pass, variant_masks
from nstcam.cam._request import Outputs, Request
from nstcam.cam.hooks import CamHooks
from nstcam.cam.methods import (
    ACTIVATION_METHODS,
    GRADIENT_METHODS,
    cam_from_weights,
    combine,
    eigencam,
    fem_weights,
    gradcam_pp_weights,
    kernel_pca,
    random_weights,
    shapley_terms,
)
from nstcam.hooks import twin
from nstcam.layouts import detect_layout, to_nchw

__all__ = ["PASSES", "Request", "linear_head"]


# -- gradient passes -----------------------------------------------------------------------------
def _gradient(method: str) -> Callable[[Request], Outputs]:
    def run(req: Request) -> Outputs:
        return gradient_pass(req.model, req.layer, method, req.x, req.classes, req.layout,
                             eigen_smooth=req.eigen_smooth)  # fmt: skip

    return run


def finer_score(
    alpha: float = 1.0, compared: int = 3
) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    """Finer-CAM's score (Zhang et al. 2025, pytorch-grad-cam's ``FinerWeightedTarget``): the target's
    logit against its ``compared`` most similar classes (nearest logits), each weighted by its
    probability: ``sum_i p_i (y_t - alpha y_i) / (sum_i p_i + 1e-9)``."""

    def score(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        y_t = logits.gather(1, target.view(-1, 1))
        dist = (logits - y_t).abs().scatter(1, target.view(-1, 1), -1.0)  # the target itself first
        near = dist.detach().topk(compared + 1, dim=1, largest=False).indices[:, 1:]
        p = logits.softmax(1).gather(1, near)
        return (p * (y_t - alpha * logits.gather(1, near))).sum(1) / (p.sum(1) + 1e-9)

    return score


def finercam_pass(req: Request) -> Outputs:
    """Finer-CAM: Grad-CAM of :func:`finer_score` (one forward, one backward to the layer)."""
    return gradient_pass(req.model, req.layer, "gradcam", req.x, req.classes, req.layout,
                         eigen_smooth=req.eigen_smooth, score=finer_score())  # fmt: skip


def shapleycam_pass(req: Request) -> Outputs:
    """ShapleyCAM: the gradient and the Hessian-vector product ``H A`` of the score with respect to
    the activation, by a double backward through the layers above the target layer only."""
    x, in_h, in_w = req.x, *req.x.shape[-2:]
    net = twin(req.model)
    handles = with_math_attention(net)  # fused attention kernels have no second derivative
    try:
        return _shapley(req, net, x, in_h, in_w)
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


def _shapley(req: Request, net: nn.Module, x: torch.Tensor, in_h: int, in_w: int) -> Outputs:
    with torch.inference_mode(False), torch.no_grad(), CamHooks(net, req.layer) as hooks:
        logits = net(x)
        act = hooks.checked_activation(logits)
        layout = req.layout or detect_layout(tuple(act.shape), in_h, in_w)
        a = to_nchw(act.detach().float(), layout, in_h, in_w)
        classes = req.classes(logits)
        raws = []
        for j in range(classes.shape[0]):
            last = j == classes.shape[0] - 1
            with torch.enable_grad():
                y = logits.gather(1, classes[j].view(-1, 1)).sum()
                (g,) = torch.autograd.grad(y, act, create_graph=True)
                if g.requires_grad:  # else the score is linear in the activation: H A = 0
                    (hvp,) = torch.autograd.grad(g, act, grad_outputs=act.detach(), retain_graph=not last,
                                                 allow_unused=True)  # fmt: skip
                else:
                    hvp = None
            hvp = torch.zeros_like(act) if hvp is None else hvp
            gn, hn = (to_nchw(t.detach().float(), layout, in_h, in_w) for t in (g, hvp))
            raws.append(torch.relu(combine(shapley_terms(a, gn, hn), req.eigen_smooth)))
    return torch.stack(raws), logits.detach().float().softmax(1), classes


def smoothgradcampp_pass(req: Request) -> Outputs:
    """Smooth Grad-CAM++ (Omeiza et al. 2019): Grad-CAM++'s alpha and weights from the first, second
    and third powers of the gradients averaged over ``n_samples`` inputs with Gaussian noise
    (``std``, normalised input units), applied to the clean activation. The noise is drawn per
    sample as ``std * randn(x.shape)`` from the call's generator; the noisy copies run as batches of
    up to ``chunk`` images."""
    n, std = req.n_samples or 4, 0.3 if req.std is None else req.std
    x, in_h, in_w = req.x, *req.x.shape[-2:]
    _, native, classes, probs = hooked_pass(req.model, req.layer, x, req.classes)
    layout = req.layout or detect_layout(tuple(native.shape), in_h, in_w)
    a = to_nchw(native.float(), layout, in_h, in_w)
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
                g = to_nchw(hooks.gradient.float(), layout, in_h, in_w).reshape(len(part), b, *a.shape[1:])
                for p, acc in enumerate(sums[j], start=1):
                    acc.add_(g.pow(p).sum(0))
    raws = []
    for j in range(k):
        g1, g2, g3 = (t / n for t in sums[j])
        raws.append(cam_from_weights(a, gradcam_pp_weights(a, g1, g2, g3), req.eigen_smooth))
    return torch.stack(raws), probs, classes


# -- activation-only passes -----------------------------------------------------------------------
def linear_head(model: nn.Module, a: torch.Tensor, logits: torch.Tensor) -> torch.Tensor:
    """The weights (classes, C) of ``model``'s pooled linear head for the activation ``a`` (N, C, h,
    w): the last ``nn.Linear`` taking C features, checked on this pass (its output on the spatial
    mean of ``a`` must be the logits), since CAM is only defined where the layer feeds a global
    average pooling and one linear layer.

    Raises:
        ValueError: no such head, with the reason and the method to use instead.
    """
    c = a.shape[1]
    heads = [m for m in model.modules() if isinstance(m, nn.Linear) and m.in_features == c]
    why = f"no nn.Linear of the model takes the layer's {c} channels"
    if heads:
        head = heads[-1]
        pooled = F.linear(
            a.mean(dim=(2, 3)), head.weight.float(), None if head.bias is None else head.bias.float()
        )
        if pooled.shape == logits.shape and torch.allclose(pooled, logits.float(), rtol=1e-3, atol=1e-3):
            return head.weight.detach().float()
        why = "the logits are not a linear layer of the layer's spatial mean (more layers stand between)"
    raise ValueError(
        f"method 'cam' needs a target layer that feeds a global average pooling and one linear "
        f"classifier (CAM's weights are that layer's): {why}. Use method='gradcam' (the same map where "
        f"that holds) or the layer before the pooling (ResNet: 'layer4')"
    )


def activation_pass(method: str) -> Callable[[Request], Outputs]:
    """RandomCAM, CAM, EigenCAM, FEM, KPCA-CAM: one forward pass to the logits, no gradient. EigenCAM
    and KPCA-CAM give one map for every class (``eigen_smooth`` changes neither: each is already a
    principal component)."""

    def run(req: Request) -> Outputs:
        logits, native, classes, probs = hooked_pass(req.model, req.layer, req.x, req.classes)
        a = read_nchw(native.float(), req.layout, req.x)
        k, (n, c) = classes.shape[0], a.shape[:2]
        if method in ("eigencam", "kpcacam"):
            raw = torch.relu(eigencam(a) if method == "eigencam" else kernel_pca(a))
            return raw.expand(k, *raw.shape), probs, classes
        if method == "fem":
            raw = cam_from_weights(a, fem_weights(a), req.eigen_smooth)
            return raw.expand(k, *raw.shape), probs, classes
        if method == "randomcam":
            gen = req.generator()
            ws = [random_weights(n, c, gen, a.device) for _ in range(k)]
        else:  # cam
            head = linear_head(req.model, a, logits)
            ws = [head[classes[j]] for j in range(k)]
        return torch.stack([cam_from_weights(a, w, req.eigen_smooth) for w in ws]), probs, classes

    return run


# -- Score-CAM variants (torch-cam's SS-CAM and IS-CAM) ------------------------------------------
def score_variant(kind: str) -> Callable[[Request], Outputs]:
    """SS-CAM (Wang et al. 2020) and IS-CAM (Naidu et al. 2020) as torch-cam 0.5.0 defines them:
    each channel of the activation, min-max normalised over positions and upsampled, masks the input;
    a channel's weight is the softmax over channels of the mean logit gain ``y(masked) - y(input)``
    over ``n_samples`` masks: SS-CAM adds Gaussian noise (``std``) to the masks, IS-CAM scales the
    masked input by the running sum of ``s / n`` for s = 1..n (torch-cam's integration). Every
    class explained reads the same masked forward passes; ``chunk`` masked images per pass."""

    def run(req: Request) -> Outputs:
        n_samples = req.n_samples or (35 if kind == "sscam" else 10)
        std = 2.0 if req.std is None else req.std
        x = req.x
        logits, native, classes, probs = hooked_pass(req.model, req.layer, x, req.classes)
        act = read_nchw(native.float(), req.layout, x)
        n, c = act.shape[:2]
        k = classes.shape[0]
        base = logits.float().gather(1, classes.T)  # (N, k)
        masks = F.interpolate(
            minmax(act, (2, 3), 1e-8), size=x.shape[-2:], mode="bilinear", align_corners=False
        )
        gains = torch.zeros(n, c, k, device=x.device)
        total, done = n_samples * n * c, 0
        with torch.inference_mode(False), torch.no_grad():
            for m, scale in variant_masks(kind, masks, n_samples, std, req.generator()):
                for i in range(n):
                    for lo in range(0, c, req.chunk):
                        batch = scale * (m[i, lo : lo + req.chunk, None] * x[i : i + 1])
                        out = req.model(batch.to(x.dtype)).float()  # (chunk, classes)
                        gains[i, lo : lo + len(batch)] += out[:, classes[:, i]] - base[i]
                        done += len(batch)
                        if req.progress is not None:
                            req.progress(done, total)
        weights = (gains / n_samples).softmax(dim=1)  # over channels
        raws = [cam_from_weights(act, weights[:, :, j], req.eigen_smooth) for j in range(k)]
        return torch.stack(raws), probs, classes

    return run


PASSES: dict[str, Callable[[Request], Outputs]] = {
    **{m: _gradient(m) for m in GRADIENT_METHODS},
    "shapleycam": shapleycam_pass,
    "smoothgradcam++": smoothgradcampp_pass,
    "finercam": finercam_pass,
    **{m: activation_pass(m) for m in ACTIVATION_METHODS},
    "scorecam": scorecam_pass,
    "sscam": score_variant("sscam"),
    "iscam": score_variant("iscam"),
    "ablationcam": ablationcam_pass,
    "fullgrad": fullgrad_pass,
    "guided-backprop": guided_backprop_pass,
    "guided-gradcam": guided_gradcam_pass,
    "legrad": legrad_pass,
}
"""Every method's whole call: name -> pass."""
