"""Grad-CAM on volumes: a (C, D, H, W) tensor or ``.npy`` file through any model of 3D convolutions
(a CT or MRI classifier), its map on the volume's own voxel grid, and a grid of slices to look at.

The volume is taken as the model takes it (already normalised: no statistics are guessed for a
scanner), one volume a call; a ``.npy`` file is read without pickles, its size checked from its
header before the data is read. The map is the layer's (d, h, w) map resized trilinearly to the
volume's (D, H, W), so voxel (z, y, x) of the map is voxel (z, y, x) of the input.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image

from nstcam._checks import whole
from nstcam._mark import tag_weights
from nstcam.cam._maps import upsample_maps
from nstcam.cam.overlay import overlay_heatmap
from nstcam.weights import WeightsInfo

__all__ = [
    "MAX_VOXELS",
    "VolumeResult",
    "explain_volume",
    "grey_clip",
    "load_volume",
    "slice_grid",
    "slice_image",
]

MAX_VOXELS = 64 * 1024 * 1024
"""Largest volume (channels x voxels) read: 256 MB of float32."""


@dataclass
class VolumeResult:
    """One class explained on a volume.

    Attributes:
        index: the class; label: its name; score: its probability.
        heatmap: (D, H, W) float32 in [0, 1], the volume's own voxel grid.
        raw: the layer's map (d, h, w), after its ReLU, not normalised.
        volume: the input (C, D, H, W) as the model took it (for slices).
        weights: where the model's weights came from (random weights: the slices say so).
    """

    index: int
    label: str
    score: float
    heatmap: np.ndarray = field(repr=False)
    raw: np.ndarray = field(repr=False)
    volume: np.ndarray = field(repr=False)
    weights: WeightsInfo | None = field(default=None, repr=False)

    def slices(self, axis: int = 0, n: int = 12, columns: int = 4, alpha: float = 0.5) -> Image.Image:
        """:func:`slice_grid` of this result (tagged with its weights: random ones are said on saving)."""
        grid = slice_grid(self.volume, self.heatmap, axis=axis, n=n, columns=columns, alpha=alpha)
        return self._tagged(grid)

    def slice(self, index: int, axis: int = 0, alpha: float = 0.5) -> Image.Image:
        """Slice ``index`` along ``axis`` with the map over it (:func:`slice_image`), tagged with its
        weights (random weights are said on saving)."""
        return self._tagged(slice_image(self.volume, self.heatmap, index, axis=axis, alpha=alpha))

    @property
    def depths(self) -> tuple[int, ...]:
        """Slices along each axis: (D, H, W)."""
        return tuple(self.heatmap.shape)

    def _tagged(self, img: Image.Image) -> Image.Image:
        w = self.weights
        return tag_weights(img, w.notice if w else "", bool(w and w.is_random))


def load_volume(src: Any, name: str = "volume", max_values: int = MAX_VOXELS) -> torch.Tensor:
    """A (C, D, H, W) float32 tensor from a tensor or array ((D, H, W): one channel), or a ``.npy`` file
    (no pickles; over ``max_values`` (default :data:`MAX_VOXELS`) refused from its header, before its
    data is read)."""
    max_values = whole("max_values", max_values, minimum=1, maximum=MAX_VOXELS)
    if isinstance(src, (str, os.PathLike)):
        path = Path(src)
        label = path.name
        if path.suffix.lower() != ".npy":
            raise ValueError(f"{name}: {label} is not a .npy file (a volume is read from .npy only)")
        with open(path, "rb") as f:
            try:
                major, _ = np.lib.format.read_magic(f)
                header = (
                    np.lib.format.read_array_header_1_0 if major == 1 else np.lib.format.read_array_header_2_0
                )
                shape, _, dtype = header(f)
            except ValueError as e:
                raise ValueError(f"{name}: {label} is not a readable .npy file ({e})") from None
        if math.prod(shape) > max_values:
            raise ValueError(
                f"{name}: {label} holds {math.prod(shape):,} values, over the limit of {max_values:,}"
            )
        if dtype.hasobject:
            raise ValueError(f"{name}: {label} holds Python objects; a volume holds numbers")
        src = np.load(path, allow_pickle=False)
    t = torch.as_tensor(np.asarray(src) if not isinstance(src, torch.Tensor) else src)
    if t.ndim == 3:
        t = t[None]
    if t.ndim != 4 or min(t.shape) < 1:
        raise ValueError(f"{name} must be (C, D, H, W) or (D, H, W); got shape {tuple(t.shape)}")
    if t.numel() > max_values:
        raise ValueError(f"{name} holds {t.numel():,} values, over the limit of {max_values:,}")
    t = t.float()
    if not torch.isfinite(t).all():
        raise ValueError(f"{name} holds NaN or infinite values")
    return t


def grey_clip(volume: Any, mean: Any, std: Any) -> torch.Tensor:
    """A scan as a video classifier's clip: the volume's first channel (C, D, H, W) min-max scaled to
    [0, 1], the same grey in three channels, normalised by the model's ``mean`` and ``std``: (3, D, H, W).
    What the app does to run a one-channel scan through a Kinetics classifier (the maps then say what
    such a model reacts to, not what a scan model would)."""
    grey = torch.from_numpy(_grey(load_volume(volume).numpy()))
    mean_t = torch.as_tensor(mean, dtype=torch.float32).reshape(3, 1, 1, 1)
    std_t = torch.as_tensor(std, dtype=torch.float32).reshape(3, 1, 1, 1)
    return (grey.expand(3, *grey.shape) - mean_t) / std_t


def explain_volume(cam: Any, volume: Any, *, target: int | None = None, top_k: int = 1) -> list[VolumeResult]:
    """Explains one volume with ``cam`` (a :class:`nstcam.GradCAM` of a 3D model): its top classes or
    ``target``, highest score first (see the module docstring)."""
    if cam.frames is None:
        raise ValueError(f"this {cam.arch} takes images; a volume needs a model of 3D convolutions")
    vol = load_volume(volume)
    x = vol[None].to(cam.device)
    probs = cam.predict(x)[0]
    if target is not None:
        chosen = [whole("target", target, minimum=0, maximum=probs.numel() - 1)]
    else:
        chosen = [int(c) for c in probs.topk(whole("top_k", top_k, minimum=1, maximum=probs.numel())).indices]
    raws, _ = cam.class_maps(x, chosen)  # one forward pass, a backward pass per class
    raws = raws[:, 0]
    maps = upsample_maps(raws.float(), tuple(vol.shape[1:]))
    arr = vol.numpy()
    return [
        VolumeResult(
            c, cam.label(c), float(probs[c]), maps[j].cpu().numpy(), raws[j].cpu().numpy(), arr, cam.weights
        )
        for j, c in enumerate(chosen)
    ]


def slice_grid(
    volume: np.ndarray,
    heatmap: np.ndarray,
    *,
    axis: int = 0,
    n: int = 12,
    columns: int = 4,
    alpha: float = 0.5,
) -> Image.Image:
    """``n`` evenly spaced slices along ``axis`` of ``volume`` (C, D, H, W) (its first channel, min-max
    scaled to grey) with ``heatmap`` (D, H, W) over each, ``columns`` to a row."""
    axis = whole("axis", axis, minimum=0, maximum=2)
    grey = _grey(volume)
    depth = grey.shape[axis]
    picks = np.unique(
        np.linspace(0, depth - 1, min(whole("n", n, minimum=1, maximum=64), depth)).round().astype(int)
    )
    cells = [_overlay_slice(grey, heatmap, int(i), axis, alpha) for i in picks]
    cols = min(columns, len(cells))
    w, h = cells[0].size
    sheet = Image.new("RGB", (w * cols, h * math.ceil(len(cells) / cols)))
    for j, c in enumerate(cells):
        sheet.paste(c, ((j % cols) * w, (j // cols) * h))
    return sheet


def slice_image(
    volume: np.ndarray, heatmap: np.ndarray, index: int, *, axis: int = 0, alpha: float = 0.5
) -> Image.Image:
    """Slice ``index`` along ``axis`` of ``volume`` (C, D, H, W) (its first channel, min-max scaled to
    grey over the whole volume, so slices compare) with ``heatmap`` (D, H, W) over it."""
    axis = whole("axis", axis, minimum=0, maximum=2)
    grey = _grey(volume)
    index = whole("index", index, minimum=0, maximum=grey.shape[axis] - 1)
    return _overlay_slice(grey, heatmap, index, axis, alpha)


def _grey(volume: np.ndarray) -> np.ndarray:
    """The first channel of ``volume`` (C, D, H, W), min-max scaled to [0, 1] over the whole volume."""
    grey = np.asarray(volume[0], dtype=np.float32)
    span = float(grey.max() - grey.min())
    return (grey - grey.min()) / (span if span > 0 else 1.0)


def _overlay_slice(grey: np.ndarray, heatmap: np.ndarray, index: int, axis: int, alpha: float) -> Image.Image:
    img = Image.fromarray((np.take(grey, index, axis=axis) * 255).astype(np.uint8)).convert("RGB")
    return overlay_heatmap(img, np.take(heatmap, index, axis=axis), alpha=alpha)
