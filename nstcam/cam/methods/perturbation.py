"""Perturbation methods: a channel's weight is what the model scores on an input (or a layer
output) that the channel changes. Score-CAM (Wang et al. 2020), its SS-CAM and IS-CAM variants as
torch-cam 0.5.0 defines them, and AblationCAM (Desai & Ramaswamy 2020). The changed passes run
``chunk`` at a time, with ``progress(done, total)`` after each."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import torch
import torch.nn.functional as F
from torch import nn

from nstcam.cam._maps import hooked_pass, minmax, normalize_maps, read_nchw
from nstcam.cam._request import Outputs, Request
from nstcam.cam._tail import checked_tail
from nstcam.cam.methods.combine import cam_from_weights
from nstcam.hooks import twin
from nstcam.layouts import detect_layout, to_nchw

__all__ = ["ablationcam_pass", "score_variant", "scorecam", "scorecam_pass", "variant_masks"]


def variant_masks(
    kind: str, masks: torch.Tensor, n_samples: int, std: float, gen: torch.Generator
) -> Iterator[tuple[torch.Tensor, float]]:
    """(masks, input scale) of each sample of SS-CAM (``masks`` plus Gaussian noise of ``std``,
    drawn from ``gen`` for the whole batch at once) or IS-CAM (``masks``, the input scaled by the
    running sum of ``s / n``), as torch-cam 0.5.0 computes them."""
    coeff = 0.0
    for s in range(n_samples):
        if kind == "sscam":
            yield (
                masks + std * torch.randn(masks.shape, generator=gen, device=masks.device, dtype=masks.dtype),
                1.0,
            )
        else:
            coeff += (s + 1) / n_samples
            yield masks, coeff


@torch.no_grad()
def scorecam(
    model: nn.Module,
    x: torch.Tensor,
    act: torch.Tensor,
    classes: torch.Tensor,
    chunk: int,
    on_chunk: Callable[[int], None] | None = None,
    eigen_smooth: bool = False,
) -> torch.Tensor:
    """Wang et al. 2020: each channel, upsampled and min-max normalised, masks the input; its weight
    is the softmax score of the target class on the masked input. ``chunk`` masked images per forward
    pass bound the memory; ``on_chunk`` is told how many masked images each pass scored.
    Returns (N, h, w) maps before ReLU."""
    n, c = act.shape[:2]
    weights = torch.empty(n, c, device=act.device)
    for i in range(n):
        up = F.interpolate(act[i : i + 1].float(), size=x.shape[-2:], mode="bilinear", align_corners=False)[0]
        masks = normalize_maps(up)  # (C, H, W)
        for s in range(0, c, chunk):
            m = masks[s : s + chunk].unsqueeze(1)
            logits = model(x[i : i + 1] * m)
            weights[i, s : s + len(m)] = logits.float().softmax(1)[:, classes[i]]
            if on_chunk is not None:
                on_chunk(len(m))
    return cam_from_weights(act.float(), weights, eigen_smooth)


def scorecam_pass(req: Request) -> Outputs:
    """A whole Score-CAM call: one hooked pass for the activation and the (k, N) classes, then masked
    forward passes with the hooks gone; ``progress(done, total)`` after each."""
    model, x, progress = req.model, req.x, req.progress
    _, native, targets, probs = hooked_pass(model, req.layer, x, req.classes)
    act = read_nchw(native, req.layout, x)
    total = targets.shape[0] * act.shape[0] * act.shape[1]
    done = 0

    def on_chunk(n: int) -> None:
        nonlocal done
        done += n
        if progress is not None:
            progress(done, total)

    with torch.inference_mode(False), torch.no_grad():
        raws = [scorecam(model, x, act, row, req.chunk, on_chunk, req.eigen_smooth) for row in targets]
    return torch.stack(raws), probs, targets


def ablationcam_pass(req: Request) -> Outputs:
    """AblationCAM (Desai & Ramaswamy 2020), gradient-free: channel k's weight is the relative drop
    of the class score (logit) when channel k of the layer's output is zeroed, ``(y - y_k) / y``.
    The ablated passes run ``chunk`` channels at a time: only the layers after the target where the
    network cuts cleanly there (``_tail.py``: a ResNet's ``layer4`` leaves a pooling and a linear
    layer), else the whole of a private hook-free twin of the network (the hook that replaces the
    layer's output is never seen by other callers); ``progress(done, total)`` after each."""
    model, layer, x, chunk, progress = req.model, req.layer, req.x, req.chunk, req.progress
    logits, native, targets, probs = hooked_pass(model, layer, x, req.classes)
    in_h, in_w = x.shape[-2:]
    layout = req.layout or detect_layout(tuple(native.shape), in_h, in_w)
    act = to_nchw(native, layout, in_h, in_w).float()
    channel_dim = {"nchw": 1, "nhwc": 3, "tokens": 2}[layout]
    n, c = act.shape[:2]
    tail = checked_tail(model, layer, native, logits)  # the layers after the target only, where cut clean
    net = twin(model)
    module = dict(net.named_modules())[layer]
    total, done = targets.shape[0] * n * c, 0
    drops = torch.empty(targets.shape[0], n, c, device=x.device)
    replaced: list[torch.Tensor] = []
    handle = module.register_forward_hook(lambda _m, _i, _o: replaced[0])
    try:
        with torch.inference_mode(False), torch.no_grad():
            for i in range(n):
                base = logits[i, targets[:, i]].float()  # (k,) scores before ablation
                for s in range(0, c, chunk):
                    ks = torch.arange(s, min(s + chunk, c), device=x.device)
                    batch = native[i : i + 1].repeat(len(ks), *([1] * (native.ndim - 1)))
                    index = [torch.arange(len(ks), device=x.device)] + [slice(None)] * (native.ndim - 1)
                    index[channel_dim] = ks
                    batch[tuple(index)] = 0
                    replaced[:] = [batch]
                    if tail is not None:
                        out = tail(batch).float()
                    else:
                        out = net(x[i : i + 1].expand(len(ks), -1, -1, -1)).float()  # (len(ks), classes)
                    scores = out[:, targets[:, i]].T  # (k, len(ks))
                    drops[:, i, s : s + len(ks)] = (base[:, None] - scores) / base[:, None]
                    done += len(ks) * targets.shape[0]
                    if progress is not None:
                        progress(done, total)
    finally:
        handle.remove()
    raws = [cam_from_weights(act, drops[j], req.eigen_smooth) for j in range(targets.shape[0])]
    return torch.stack(raws), probs, targets


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
