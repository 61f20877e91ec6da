"""Maps for target objects with every method that takes one: the one-pass methods
(:func:`nstcam.cam.targets.one_pass.target_pass`) and the perturbation ones, Score-CAM, SS-CAM, IS-CAM and
AblationCAM, which score the model's output on changed inputs (or a changed layer) with the target.

A perturbation pass scores all of an image's targets on each changed copy, so k targets of an
image (a detector's k boxes) cost the forward passes of one. Score-CAM's channel weights are the
softmax over channels of the target's score on each masked image (pytorch-grad-cam's convention for
any target: a target object has no class probability); SS-CAM and IS-CAM use the mean gain over the
unmasked score, as for classes; AblationCAM the relative drop ``(y - y_k) / y``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from nstcam.cam._maps import minmax, normalize_maps
from nstcam.cam.methods import cam_from_weights
from nstcam.cam.methods.perturbation import variant_masks
from nstcam.cam.registry import method as method_record
from nstcam.cam.targets.objects import Target
from nstcam.cam.targets.one_pass import model_output, reader, target_pass
from nstcam.hooks import HookManager, twin
from nstcam.layouts import detect_layout

__all__ = ["TargetOptions", "target_maps"]

Rows = Callable[[Any], Sequence[Sequence[Target]]]


@dataclass(frozen=True)
class TargetOptions:
    """The engine's settings a pass may need: masked images per forward pass, the seed of its random
    numbers, SS-CAM/IS-CAM samples and noise, and ``progress(done, total)``."""

    chunk: int = 32
    seed: int = 0
    n_samples: int | None = None
    std: float | None = None
    progress: Callable[[int, int], None] | None = None


def target_maps(
    model: nn.Module,
    layer: str,
    method: str,
    x: torch.Tensor,
    rows: Rows,
    layout: str | None = None,
    *,
    eigen_smooth: bool = False,
    options: TargetOptions = TargetOptions(),
) -> tuple[torch.Tensor, torch.Tensor, Any]:
    """(raw maps (k, N, h, w), target scores (k, N), the detached output) for the targets ``rows``
    picks from the model's output, with ``method``."""
    if method_record(method).targets != "perturbation":
        return target_pass(
            model, layer, method, x, rows, layout, eigen_smooth=eigen_smooth, seed=options.seed
        )
    with torch.inference_mode(False), torch.no_grad(), HookManager(model, [layer], detach=True) as hooks:
        out = model_output(model(x))
        native = hooks.outputs.get(layer)
    if native is None:
        raise RuntimeError(f"layer {layer!r} did not run in the forward pass")
    a, _ = reader(native, layer, layout, *x.shape[-2:])
    chosen = [list(row) for row in rows(out)]
    n, c = a.shape[:2]
    if not chosen:
        return a.new_zeros(0, n, *a.shape[-2:]), a.new_zeros(0, n), out
    base = torch.stack(
        [torch.stack([t(out, i).reshape(()).float() for i, t in enumerate(row)]) for row in chosen]
    )
    counter = _Counter(options.progress, _total(method, n, c, options))
    weights = torch.empty(len(chosen), n, c, device=a.device)  # (k, N, C)
    with torch.inference_mode(False), torch.no_grad():
        if method in ("sscam", "iscam"):  # noise drawn for the whole batch per sample, as the class path
            weights = _variant(method, model, x, a, chosen, base, options, counter)
        for i in range(n if method in ("scorecam", "ablationcam") else 0):
            targets, x1, a1, b = [row[i] for row in chosen], x[i : i + 1], a[i : i + 1], base[:, i]
            if method == "ablationcam":
                weights[:, i] = _ablation(model, layer, layout, x, native, i, targets, b, options, counter)
            else:
                masks = normalize_maps(_up(a1, x))
                weights[:, i] = _masked_scores(model, x1, masks, targets, options.chunk, counter).softmax(1)
    raws = torch.stack([cam_from_weights(a, weights[j], eigen_smooth) for j in range(len(chosen))])
    return raws, base, out


class _Counter:
    def __init__(self, progress: Callable[[int, int], None] | None, total: int) -> None:
        self.progress, self.total, self.done = progress, total, 0

    def __call__(self, m: int) -> None:
        self.done += m
        if self.progress is not None:
            self.progress(self.done, self.total)


def _total(method: str, n: int, c: int, options: TargetOptions) -> int:
    samples = {"sscam": options.n_samples or 35, "iscam": options.n_samples or 10}.get(method, 1)
    return n * c * samples


def _up(a: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    return F.interpolate(a.float(), size=x.shape[-2:], mode="bilinear", align_corners=False)[0]


def _scores(out: Any, targets: Sequence[Target], m: int) -> torch.Tensor:
    """(k, m) scores of each target on each of the ``m`` images of a changed batch of one image."""
    return torch.stack([torch.stack([t(out, j).reshape(()).float() for j in range(m)]) for t in targets])


def _masked_scores(model, x1, masks, targets, chunk, counter, scale: float = 1.0) -> torch.Tensor:
    """(k, C) scores of the image ``x1`` (1, 3, H, W) masked by each of ``masks`` (C, H, W)."""
    parts = []
    for s in range(0, masks.shape[0], chunk):
        m = masks[s : s + chunk].unsqueeze(1)
        out = model_output(model((scale * (m * x1)).to(x1.dtype)))
        parts.append(_scores(out, targets, len(m)))
        counter(len(m))
    return torch.cat(parts, dim=1)


def _variant(method, model, x, a, chosen, base, options, counter) -> torch.Tensor:
    """(k, N, C) weights of SS-CAM (noisy masks) or IS-CAM (integrated masks), as the class path
    computes them (the same noise from the same seed)."""
    n_samples = options.n_samples or (35 if method == "sscam" else 10)
    std = 2.0 if options.std is None else options.std
    masks = F.interpolate(
        minmax(a.float(), (2, 3), 1e-8), size=x.shape[-2:], mode="bilinear", align_corners=False
    )
    gen = torch.Generator(device=x.device).manual_seed(options.seed)
    gains = torch.zeros(len(chosen), *masks.shape[:2], device=x.device)
    for m, scale in variant_masks(method, masks, n_samples, std, gen):
        for i in range(x.shape[0]):
            targets = [row[i] for row in chosen]
            y = _masked_scores(model, x[i : i + 1], m[i], targets, options.chunk, counter, scale)
            gains[:, i] += y - base[:, i, None]
    return (gains / n_samples).softmax(dim=2)


def _ablation(model, layer, layout, x, native, i, targets, base, options, counter) -> torch.Tensor:
    """(k, C) relative drops ``(y - y_c) / y`` of each target when channel c of the layer is zeroed
    (a dict of levels: the channel of its level, counted across the levels as they are read)."""
    net = twin(model)  # a private, hook-free copy: the replacing hook is never seen by other callers
    module = dict(net.named_modules())[layer]
    replaced: list[Any] = []
    handle = module.register_forward_hook(lambda _m, _i, _o: replaced[0])
    try:
        channels = _channels(native, layout, x)
        drops = []
        for s in range(0, len(channels), options.chunk):
            ks = channels[s : s + options.chunk]
            replaced[:] = [_ablated(native, i, ks)]
            out = model_output(net(x[i : i + 1].expand(len(ks), *x.shape[1:])))
            y = _scores(out, targets, len(ks))
            drops.append(
                torch.where(base[:, None] != 0, (base[:, None] - y) / base[:, None], base.new_zeros(()))
            )
            counter(len(ks))
        return torch.cat(drops, dim=1)
    finally:
        handle.remove()


def _channels(native: Any, layout: str | None, x: torch.Tensor) -> list[tuple[Any, int, int]]:
    """Each channel as (level key or None, channel dimension, index), in the order maps read them."""
    if isinstance(native, dict):
        return [(k, 1, ch) for k, v in native.items() for ch in range(v.shape[1])]
    layout = layout or detect_layout(tuple(native.shape), *x.shape[-2:])
    dim = {"nchw": 1, "nhwc": 3, "tokens": 2}[layout]
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
