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
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image

from nstcam._checks import StoppedEarly, whole
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
    "volume_header",
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


def volume_header(path: str | os.PathLike, name: str = "volume") -> tuple[tuple[int, ...], np.dtype]:
    """The shape and dtype of a ``.npy`` file, read from its header alone (its data never is): what
    a server checks a volume's size, kind and cost against before reading it.

    Raises:
        ValueError: not a ``.npy`` file, an unreadable header, or values that are not real numbers
            (the message names the file by its own name).
    """
    path = Path(path)
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
        except ValueError:
            raise ValueError(
                f"{name}: {label} is not a readable .npy file (its header must be a plain dictionary of "
                "descr, fortran_order and shape)"
            ) from None
    _check_dtype(dtype, name, label)
    return tuple(shape), dtype


def load_volume(src: Any, name: str = "volume", max_values: int = MAX_VOXELS) -> torch.Tensor:
    """A (C, D, H, W) float32 tensor from a tensor or array ((D, H, W): one channel), or a ``.npy`` file
    (no pickles; over ``max_values`` (default :data:`MAX_VOXELS`) refused from its header, before its
    data is read). Real numbers of any width and byte order are converted to float32; complex
    numbers, text, bytes, dates and records are refused by name (from the header, for a file)."""
    max_values = whole("max_values", max_values, minimum=1, maximum=MAX_VOXELS)
    if isinstance(src, (str, os.PathLike)):
        shape, _ = volume_header(src, name)
        values = math.prod(shape)
        if values > max_values:
            label = Path(src).name
            raise ValueError(f"{name}: {label} holds {values:,} values, over the limit of {max_values:,}")
        src = np.load(src, allow_pickle=False)
    if isinstance(src, torch.Tensor):
        if src.is_complex():
            raise ValueError(f"{name} holds complex numbers; {_REAL_HINT}")
        t = src
    else:
        arr = np.asarray(src)
        _check_dtype(arr.dtype, name, "it")
        t = torch.from_numpy(arr.astype(np.float32, copy=False))  # any width and byte order (>f4, int16...)
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


_KINDS = {
    "S": "bytes",
    "a": "bytes",
    "U": "text",
    "M": "dates",
    "m": "time spans",
    "V": "raw or structured records",
    "O": "Python objects",
}
_REAL_HINT = "a volume holds real numbers: send its magnitude (np.abs) or its real part"


def _check_dtype(dtype: np.dtype, name: str, label: str) -> None:
    """A volume's values must be real numbers (booleans, integers, floats of any width and byte
    order, converted to float32); anything else refused by what it holds, before its data is read."""
    if dtype.kind in "biuf" and dtype.fields is None:
        return
    if dtype.kind == "c":
        raise ValueError(f"{name}: {label} holds complex numbers ({dtype.name}); {_REAL_HINT}")
    what = _KINDS.get(dtype.kind, "values that are not numbers")
    raise ValueError(f"{name}: {label} holds {what} (dtype {dtype.str[:24]}); a volume holds real numbers")


def grey_clip(volume: Any, mean: Any, std: Any) -> torch.Tensor:
    """A scan as a video classifier's clip: the volume's first channel (C, D, H, W) min-max scaled to
    [0, 1], the same grey in three channels, normalised by the model's ``mean`` and ``std``: (3, D, H, W).
    What the app does to run a one-channel scan through a Kinetics classifier (the maps then say what
    such a model reacts to, not what a scan model would)."""
    grey = torch.from_numpy(_grey(load_volume(volume).numpy()))
    mean_t = torch.as_tensor(mean, dtype=torch.float32).reshape(3, 1, 1, 1)
    std_t = torch.as_tensor(std, dtype=torch.float32).reshape(3, 1, 1, 1)
    return (grey.expand(3, *grey.shape) - mean_t) / std_t


def explain_volume(
    cam: Any,
    volume: Any,
    *,
    target: int | None = None,
    top_k: int = 1,
    progress: Callable[[int, int], Any] | None = None,
) -> list[VolumeResult]:
    """Explains one volume with ``cam`` (a :class:`nstcam.GradCAM` of a 3D model): its top classes or
    ``target``, highest score first (see the module docstring).

    Args:
        progress: ``progress(done, total)`` after each of the two passes (the top classes; the
            maps); returning False stops (a ``ValueError`` saying it was cancelled).
    """
    if cam.frames is None:
        raise ValueError(f"this {cam.arch} takes images; a volume needs a model of 3D convolutions")

    def tick(done: int) -> None:
        if progress is not None and progress(done, 2) is False:
            raise StoppedEarly(f"cancelled after {done} of 2 passes")

    vol = load_volume(volume)
    x = vol[None].to(cam.device)
    probs = cam.predict(x)[0]
    tick(1)
    if target is not None:
        chosen = [whole("target", target, minimum=0, maximum=probs.numel() - 1)]
    else:
        chosen = [int(c) for c in probs.topk(whole("top_k", top_k, minimum=1, maximum=probs.numel())).indices]
    raws, _ = cam.class_maps(x, chosen)  # one forward pass, a backward pass per class
    tick(2)
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
