"""Perturbation methods: a channel's weight is what the model scores on an input (or a layer
output) that the channel changes. Score-CAM (Wang et al. 2020), its SS-CAM and IS-CAM variants as
torch-cam 0.5.0 defines them, and AblationCAM (Desai & Ramaswamy 2020). The changed passes run
``chunk`` at a time, with ``progress(done, total)`` after each."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch
from torch import nn

from nstcam.cam._maps import hooked_pass, minmax, model_output, normalize_maps, read_nchw, resize_grid
from nstcam.cam._request import Outputs, Request, TargetRequest
from nstcam.cam._tail import checked_tail
from nstcam.cam.methods.combine import cam_from_weights, grid_dims
from nstcam.hooks import twin
from nstcam.layouts import channel_dim, detect_layout, input_grid, to_nchw

__all__ = [
    "ablationcam_pass",
    "ablationcam_targets",
    "score_variant",
    "scorecam",
    "scorecam_pass",
    "scorecam_targets",
    "variant_masks",
    "variant_targets",
]


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
    Returns (N, *grid) maps before ReLU."""
    n, c = act.shape[:2]
    weights = torch.empty(n, c, device=act.device)
    for i in range(n):
        up = resize_grid(act[i : i + 1].float(), input_grid(x))[0]
        masks = normalize_maps(up)  # (C, *grid)
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
    grid = input_grid(x)
    layout = req.layout or detect_layout(tuple(native.shape), *grid)
    act = to_nchw(native, layout, *grid).float()
    dim = channel_dim(layout)
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
                    index[dim] = ks
                    batch[tuple(index)] = 0
                    replaced[:] = [batch]
                    if tail is not None:
                        out = tail(batch).float()
                    else:
                        out = net(x[i : i + 1].expand(len(ks), *x.shape[1:])).float()  # (len(ks), classes)
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
        masks = resize_grid(minmax(act, grid_dims(act), 1e-8), input_grid(x))
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


# -- on target objects (boxes, regions, any output): the (k, N, C) channel weights -----------------
def scorecam_targets(req: TargetRequest) -> torch.Tensor:
    """Score-CAM's weights for target objects: the softmax over channels of each target's score on
    the image masked by each channel (pytorch-grad-cam's convention for any target: a target object
    has no class probability)."""
    weights = torch.empty(len(req.rows), req.x.shape[0], req.a.shape[1], device=req.a.device)
    for i in range(req.x.shape[0]):
        targets, x1 = [row[i] for row in req.rows], req.x[i : i + 1]
        masks = normalize_maps(_up(req.a[i : i + 1], req.x))
        weights[:, i] = _masked_scores(req.model, x1, masks, targets, req.chunk, req.done).softmax(1)
    return weights


def ablationcam_targets(req: TargetRequest) -> torch.Tensor:
    """AblationCAM's weights for target objects: each target's relative drop ``(y - y_c) / y`` when
    channel c of the layer is zeroed, on a private twin of the network."""
    weights = torch.empty(len(req.rows), req.x.shape[0], req.a.shape[1], device=req.a.device)
    for i in range(req.x.shape[0]):
        weights[:, i] = _ablation(req, i, [row[i] for row in req.rows], req.base[:, i])
    return weights


def variant_targets(kind: str) -> Callable[[TargetRequest], torch.Tensor]:
    """SS-CAM's or IS-CAM's (k, N, C) channel weights for target objects: the softmax over channels
    of the mean gain over the unchanged score, the same noise from the same seed as the class path."""

    def weights(req: TargetRequest) -> torch.Tensor:
        return _variant(kind, req)

    return weights


def _variant(method: str, req: TargetRequest) -> torch.Tensor:
    """(k, N, C) weights of SS-CAM (noisy masks) or IS-CAM (integrated masks), as the class path
    computes them (the same noise from the same seed)."""
    x, a, chosen, base = req.x, req.a, req.rows, req.base
    n_samples = req.n_samples or (35 if method == "sscam" else 10)
    std = 2.0 if req.std is None else req.std
    masks = resize_grid(minmax(a.float(), grid_dims(a), 1e-8), input_grid(x))
    gen = torch.Generator(device=x.device).manual_seed(req.seed)
    gains = torch.zeros(len(chosen), *masks.shape[:2], device=x.device)
    for m, scale in variant_masks(method, masks, n_samples, std, gen):
        for i in range(x.shape[0]):
            targets = [row[i] for row in chosen]
            y = _masked_scores(req.model, x[i : i + 1], m[i], targets, req.chunk, req.done, scale)
            gains[:, i] += y - base[:, i, None]
    return (gains / n_samples).softmax(dim=2)


def _ablation(req: TargetRequest, i: int, targets: Sequence[Any], base: torch.Tensor) -> torch.Tensor:
    """(k, C) relative drops ``(y - y_c) / y`` of each target when channel c of the layer is zeroed
    (a dict of levels: the channel of its level, counted across the levels as they are read)."""
    x, native, chunk = req.x, req.native, req.chunk
    net = twin(req.model)  # a private, hook-free copy: the replacing hook is never seen by other callers
    module = dict(net.named_modules())[req.layer]
    replaced: list[Any] = []
    handle = module.register_forward_hook(lambda _m, _i, _o: replaced[0])
    try:
        channels = _channels(native, req.layout, x)
        drops = []
        for s in range(0, len(channels), chunk):
            ks = channels[s : s + chunk]
            replaced[:] = [_ablated(native, i, ks)]
            out = model_output(net(x[i : i + 1].expand(len(ks), *x.shape[1:])))
            y = _scores(out, targets, len(ks))
            drops.append(
                torch.where(base[:, None] != 0, (base[:, None] - y) / base[:, None], base.new_zeros(()))
            )
            req.done(len(ks))
        return torch.cat(drops, dim=1)
    finally:
        handle.remove()


def _up(a: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    return resize_grid(a.float(), input_grid(x))[0]


def _scores(out: Any, targets: Sequence[Any], m: int) -> torch.Tensor:
    """(k, m) scores of each target on each of the ``m`` images of a changed batch of one image."""
    return torch.stack([torch.stack([t(out, j).reshape(()).float() for j in range(m)]) for t in targets])


def _masked_scores(model, x1, masks, targets, chunk, done, scale: float = 1.0) -> torch.Tensor:
    """(k, C) scores of the image ``x1`` (1, 3, H, W) masked by each of ``masks`` (C, H, W)."""
    parts = []
    for s in range(0, masks.shape[0], chunk):
        m = masks[s : s + chunk].unsqueeze(1)
        out = model_output(model((scale * (m * x1)).to(x1.dtype)))
        parts.append(_scores(out, targets, len(m)))
        done(len(m))
    return torch.cat(parts, dim=1)


def _channels(native: Any, layout: str | None, x: torch.Tensor) -> list[tuple[Any, int, int]]:
    """Each channel as (level key or None, channel dimension, index), in the order maps read them."""
    if isinstance(native, dict):
        return [(k, 1, ch) for k, v in native.items() for ch in range(v.shape[1])]
    layout = layout or detect_layout(tuple(native.shape), *input_grid(x))
    dim = channel_dim(layout)
    return [(None, dim, ch) for ch in range(native.shape[dim])]


def _ablated(native: Any, i: int, ks: Sequence[tuple[Any, int, int]]) -> Any:
    """Image i's layer output repeated once per channel of ``ks``, copy j with channel ``ks[j]`` zeroed."""

    def one(t: torch.Tensor, key: Any) -> torch.Tensor:
        batch = t[i : i + 1].repeat(len(ks), *([1] * (t.ndim - 1)))
        for j, (level, dim, ch) in enumerate(ks):
            if level == key:
                batch[j].select(dim - 1, ch).zero_()
        return batch

    if isinstance(native, dict):
        return type(native)((k, one(v, k)) for k, v in native.items())
    return one(native, None)
