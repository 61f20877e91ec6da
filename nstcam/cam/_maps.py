"""From activations and scores to maps: per-map normalisation, upsampling, and Score-CAM's weights."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import torch
import torch.nn.functional as F
from torch import nn

from nstcam.cam._request import Outputs, Request
from nstcam.cam._tail import checked_tail
from nstcam.cam.hooks import CamHooks
from nstcam.cam.methods import cam_from_weights
from nstcam.hooks import twin
from nstcam.layouts import detect_layout, to_nchw

__all__ = [
    "ablationcam_pass",
    "hooked_pass",
    "minmax",
    "normalize_maps",
    "read_nchw",
    "scorecam",
    "scorecam_pass",
    "upsample_maps",
    "variant_masks",
]


def normalize_maps(m: torch.Tensor) -> torch.Tensor:
    """Per-map min-max to [0, 1]; an all-constant map becomes zeros."""
    flat = m.flatten(1)
    lo, hi = flat.min(1, keepdim=True).values, flat.max(1, keepdim=True).values
    span = hi - lo
    out = torch.where(
        span > 0, (flat - lo) / torch.where(span > 0, span, torch.ones_like(span)), torch.zeros_like(flat)
    )
    return out.view_as(m)


def minmax(t: torch.Tensor, dims: tuple[int, ...], eps: float) -> torch.Tensor:
    """``(t - min) / (max - min + eps)`` over ``dims``: the libraries' per-map scaling with their own
    eps (torch-cam 1e-8, pytorch-grad-cam 1e-7), kept where a map must match theirs."""
    t = t - t.amin(dim=dims, keepdim=True)
    return t / (t.amax(dim=dims, keepdim=True) + eps)


def upsample_maps(raw: torch.Tensor, size: tuple[int, int]) -> torch.Tensor:
    """(N, h, w) raw maps to (N, H, W) maps in [0, 1] at ``size`` (bilinear, normalised before and after)."""
    up = F.interpolate(normalize_maps(raw).unsqueeze(1), size=size, mode="bilinear", align_corners=False)
    return normalize_maps(up.squeeze(1))


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


def hooked_pass(
    model: nn.Module, layer: str, x: torch.Tensor, classes: Callable[[torch.Tensor], torch.Tensor]
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """One forward pass with ``layer`` recorded: (logits, the layer's activation in its own layout,
    the (k, N) ``classes(logits)``, probabilities), all detached (grad mode is on past the layer)."""
    with torch.inference_mode(False), torch.no_grad(), CamHooks(model, layer) as hooks:
        logits = model(x)
        act = hooks.checked_activation(logits).detach()
        targets = classes(logits)
    return logits.detach(), act, targets, logits.detach().float().softmax(1)


def read_nchw(act: torch.Tensor, layout: str | None, x: torch.Tensor) -> torch.Tensor:
    """``act`` as (N, C, h, w) for the input ``x``, in ``layout`` (None: read from the shape)."""
    in_h, in_w = x.shape[-2:]
    return to_nchw(act, layout or detect_layout(tuple(act.shape), in_h, in_w), in_h, in_w)


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
