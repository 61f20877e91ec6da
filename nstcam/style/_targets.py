"""Targets of one scale: content features, style Gram matrices (cached per call or batch) and the
style mask resized to each layer, for one image or a batch of images of one size."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from PIL import Image

from nstcam.color import color_stats, luminance_only, match_color, match_luminance
from nstcam.image import image_to_tensor, resize_long_side
from nstcam.mask import resize_mask
from nstcam.style._plan import Plan
from nstcam.style._regions import Region, region_masks, region_plan, region_weights
from nstcam.style._runtime import Runtime
from nstcam.style._windows import starts
from nstcam.style.hooks import VGGFeatureHooks
from nstcam.style.losses import StyleLoss, style_loss_named
from nstcam.style.losses.gram import gram
from nstcam.style.losses.sliced import MAX_SAMPLES
from nstcam.style.losses.wasserstein import augmented
from nstcam.style.vgg import layer_stride

__all__ = [
    "ScaleInputs",
    "Targets",
    "batch_style_targets",
    "scale_images",
    "scale_inputs",
    "style_targets",
    "tiled_grams",
    "tiled_positions",
]


@dataclass
class Targets:
    """What the losses at one scale compare against (one row per image of the batch)."""

    content: dict[str, torch.Tensor]  # (N, C, h, w) per layer
    style: dict[str, torch.Tensor]  # (1, C, C) shared by the batch, or (N, C, C)
    mask: torch.Tensor | None = None  # (N, 1, h, w) style masks at this scale, in-optimisation mode only
    pixels: torch.Tensor | None = None  # the contents at this scale (for the masked pixel anchor)
    layer_masks: dict = field(default_factory=dict)  # feature shape -> masks resized to it
    draws: int = 0  # evaluations so far (the sliced loss draws its directions from it)
    block: int = 0  # L-BFGS's blocks of evaluations, each with its own directions
    regions: list = field(default_factory=list)  # a style per region (_regions.Region); style unused
    covered: bool = False  # the mask is 1 everywhere (regions that cover the image): no content kept

    def next_draw(self) -> int:
        """The number of this evaluation (1, 2, ...)."""
        self.draws += 1
        return self.draws

    def new_block(self) -> None:
        """Starts a block of L-BFGS evaluations (one objective for its line searches)."""
        self.block += 1

    def mask_for(self, f: torch.Tensor) -> torch.Tensor:
        key = tuple(f.shape[-2:])
        if key not in self.layer_masks:
            self.layer_masks[key] = resize_mask(self.mask, key)
        return self.layer_masks[key]


@dataclass
class ScaleInputs:
    """The content at one scale and the targets computed from it.

    Attributes:
        full: the content in colour.
        seen: what the network sees (luminance only when colours are preserved).
        targets: the loss targets.
    """

    full: torch.Tensor
    seen: torch.Tensor
    targets: Targets


def _read_style(rt, hooks, s: torch.Tensor, w: float, plan: Plan, loss: StyleLoss, read: dict) -> None:
    """Adds one style image ``s`` of blend weight ``w`` to what ``loss`` reads of each style layer:
    its features (sliced: the positions the target keeps) or its Gram matrices, summed with ``w``."""
    layers = list(plan.style_layers)
    tiled = plan.tile is not None and max(s.shape[-2:]) > plan.tile
    if loss.reads == "positions":
        feats = (
            tiled_positions(rt, hooks, s, layers, plan.tile, plan.seed) if tiled else rt.features(hooks, s)
        )
        for n in layers:
            read.setdefault(n, []).append((feats[n], w))
        return
    if tiled:
        grams = tiled_grams(rt, hooks, s, layers, plan.tile, augment=loss.augment)
    else:
        feats = rt.features(hooks, s)
        grams = {n: gram(augmented(feats[n]) if loss.augment else feats[n]) for n in layers}
    for n in layers:
        g = grams[n] * w
        read[n] = read[n] + g if n in read else g


def style_targets(
    rt: Runtime,
    hooks: VGGFeatureHooks,
    styles: list[Image.Image],
    plan: Plan,
    long_side: int,
    content_t: torch.Tensor,
    cache: dict,
) -> dict[str, torch.Tensor]:
    """Blended Gram matrices of the style images at ``long_side * style_scale``; ``cache`` (one per
    call, or per batch) keeps them for the next image or scale that needs the same."""
    s_side = max(16, round(long_side * plan.style_scale))
    tiled = plan.tile is not None and s_side > plan.tile
    key = (s_side, tuple(plan.blend), tuple(plan.style_layers), plan.preserve_color, tiled, plan.style_loss)
    if plan.luminance:  # grey style matched to this content's luminance statistics
        key += (round(float(content_t.mean()), 4), round(float(content_t.std()), 4))
    elif plan.histogram:  # style recoloured to this content's colour statistics
        mu, cov = color_stats(content_t)
        key += tuple(round(v, 5) for v in [*mu.tolist(), *cov.flatten().tolist()])
    if key in cache:
        return cache[key]
    loss = style_loss_named(plan.style_loss)
    read: dict[str, Any] = {}  # per layer: the blend's sum of Grams, or its (features, weight) list
    with torch.no_grad():
        for img, w in zip(styles, plan.blend, strict=True):
            if w == 0:
                continue
            s = image_to_tensor(resize_long_side(img, s_side), rt.device)
            if plan.luminance:
                s = match_luminance(s, content_t)
            elif plan.histogram:
                s = match_color(s, content_t)
            _read_style(rt, hooks, s, w, plan, loss, read)
            rt.style_targets.add()
        targets = {name: loss.target(read[name], plan.seed) for name in plan.style_layers}
    cache[key] = targets
    return targets


def scale_images(
    rt: Runtime, contents: list[Image.Image], plan: Plan, side: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """The contents (all of one size) at long side ``side``: in colour, and as the network sees them
    (luminance only when colours are preserved that way)."""
    full = torch.cat([image_to_tensor(resize_long_side(c, side), rt.device) for c in contents])
    return full, luminance_only(full) if plan.luminance else full


def batch_style_targets(
    rt: Runtime,
    hooks: VGGFeatureHooks,
    styles: list[Image.Image],
    plan: Plan,
    side: int,
    seen: torch.Tensor,
    cache: dict,
) -> dict[str, torch.Tensor]:
    """Style targets of a batch: one (1, C, C) per layer when every image shares them, else (N, C, C)."""
    with torch.no_grad():
        per_image = [
            style_targets(rt, hooks, styles, plan, side, seen[i : i + 1], cache) for i in range(len(seen))
        ]
    if all(t is per_image[0] for t in per_image):
        return per_image[0]
    return {n: _cat([t[n] for t in per_image]) for n in plan.style_layers}


def _cat(parts: list) -> torch.Tensor | tuple[torch.Tensor, ...]:
    """One target per image of a batch: Grams, or the W2 statistics' tuples, stacked."""
    if isinstance(parts[0], tuple):
        return tuple(torch.cat(group) for group in zip(*parts, strict=True))
    return torch.cat(parts)


def scale_inputs(
    rt: Runtime,
    hooks: VGGFeatureHooks,
    contents: list[Image.Image],
    styles: list[Image.Image],
    plan: Plan,
    side: int,
    cache: dict,
    masks: list[np.ndarray | None],
    regions: list[np.ndarray | None] | None = None,
) -> ScaleInputs:
    """The contents (all of one size) at long side ``side`` and every target the losses need there
    (``regions``: a style per region, :mod:`nstcam.style._regions`)."""
    full, seen = scale_images(rt, contents, plan, side)
    in_loss = any(m is not None for m in masks) and plan.extra["mask_mode"] == "optimize"
    parts: list[Region] = []
    if regions:
        region_ms, union = region_masks(regions, tuple(seen.shape[-2:]), len(seen), rt.device)
        for i, (m, wt) in enumerate(zip(region_ms, region_weights(plan), strict=True)):
            own = batch_style_targets(rt, hooks, styles, region_plan(plan, i), side, seen, cache)
            parts.append(Region(own, m, wt))
        style = parts[0].style
    else:
        style = batch_style_targets(rt, hooks, styles, plan, side, seen, cache)
    with torch.no_grad():
        feats = rt.features(hooks, seen)
        mask = None
        if regions:
            mask, in_loss = union, True
        elif in_loss:
            ones = np.ones(seen.shape[-2:], np.float32)
            mask = torch.cat(
                [resize_mask(ones if m is None else m, tuple(seen.shape[-2:]), rt.device) for m in masks]
            )
        targets = Targets(
            content={n: feats[n].detach().float() for n in plan.content_layers},
            style=style,
            mask=mask,
            pixels=seen if in_loss else None,
            regions=parts,
            covered=mask is not None and bool((mask == 1).all()),
        )
    return ScaleInputs(full, seen, targets)


def _window_cores(rt: Runtime, hooks: VGGFeatureHooks, s: torch.Tensor, layers: list[str], tile: int):
    """Yields ``(layer, features)`` of ``s`` (1, 3, H, W) read window by window: equal windows of
    ``tile`` px (so the memory follows the tile), neighbours overlapping by twice a margin of context
    (``min(64, tile // 4)`` px), each feature position given by the one window whose core holds its
    centre (cores split the overlaps in the middle)."""
    h, w = s.shape[-2:]
    margin = min(64, tile // 4)
    win = tile
    ys, xs = starts(h, win, 2 * margin), starts(w, win, 2 * margin)
    for iy, y0 in enumerate(ys):
        for ix, x0 in enumerate(xs):
            wy, wx = slice(y0, min(h, y0 + win)), slice(x0, min(w, x0 + win))
            feats = rt.features(hooks, s[..., wy, wx])
            for name in layers:
                f, st = feats[name], layer_stride(name)
                keep_y = _core(ys, iy, win, h, y0, st, f.shape[-2], f.device)
                keep_x = _core(xs, ix, win, w, x0, st, f.shape[-1], f.device)
                part = f[..., keep_y, :][..., keep_x]
                if part.numel():
                    yield name, part
            del feats  # before the next window's forward pass: one set of features alive at a time


def tiled_grams(
    rt: Runtime, hooks: VGGFeatureHooks, s: torch.Tensor, layers: list[str], tile: int, augment: bool = False
) -> dict[str, torch.Tensor]:
    """Gram matrices of ``s`` (1, 3, H, W) read window by window (:func:`_window_cores`); equal to
    :func:`gram` of the whole image up to context beyond the margin (``tests/test_tiles.py`` bounds
    the difference at 5 %). ``augment``: of :func:`~nstcam.style.losses.wasserstein.augmented` features
    (W2's moments)."""
    sums: dict[str, torch.Tensor] = {}
    counts = dict.fromkeys(layers, 0)
    for name, part in _window_cores(rt, hooks, s, layers, tile):
        g = gram(augmented(part) if augment else part) * (part.shape[-2] * part.shape[-1])
        sums[name] = sums[name] + g if name in sums else g
        counts[name] += part.shape[-2] * part.shape[-1]
    return {name: sums[name] / max(1, counts[name]) for name in layers}


def tiled_positions(
    rt: Runtime, hooks: VGGFeatureHooks, s: torch.Tensor, layers: list[str], tile: int, seed: int
) -> dict[str, torch.Tensor]:
    """The sliced loss' style positions of ``s`` read window by window (:func:`_window_cores`):
    each window keeps a share of its positions (drawn from ``seed``) so that about
    :data:`~nstcam.style.losses.sliced.MAX_SAMPLES` are kept in all, as ``(1, C, 1, M)``."""
    h, w = s.shape[-2:]
    gen = torch.Generator().manual_seed(seed)
    kept: dict[str, list[torch.Tensor]] = {n: [] for n in layers}
    for name, part in _window_cores(rt, hooks, s, layers, tile):
        st = layer_stride(name)
        share = min(1.0, MAX_SAMPLES / max(1, (h // st) * (w // st)))
        x = part[0].flatten(1)
        take = torch.randperm(x.shape[1], generator=gen)[: max(1, round(x.shape[1] * share))]
        kept[name].append(x[:, take.to(x.device)].float())
    return {n: torch.cat(kept[n], dim=1)[None, :, None] for n in layers}


def _core(
    starts: list[int], i: int, win: int, length: int, start: int, stride: int, n: int, device: torch.device
) -> torch.Tensor:
    """Feature rows (or columns) of window ``i`` whose centres lie in its core."""
    lo = 0 if i == 0 else (starts[i] + starts[i - 1] + win) // 2
    hi = length if i == len(starts) - 1 else (starts[i + 1] + starts[i] + win) // 2
    centre = start + torch.arange(n, device=device) * stride + stride / 2
    return torch.nonzero((centre >= lo) & (centre < hi)).flatten()
