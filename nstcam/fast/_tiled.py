"""A one-pass network's picture at any size in bounded memory (issue 76).

Both fast networks are three stages (:class:`Stages`): a contraction to a quarter of the size, residual
blocks there, an expansion back. Each instance normalisation reads its input's statistics over the
whole picture, so cutting the picture into tiles and painting each alone would give each tile its
own look (seams, and a picture unlike the untiled one). Here:

- the contraction runs tile by tile (each core with ``HALO`` px of context, cores on multiples of 4
  so every stride lines up with the untiled pass): its output, a quarter of the size in each side,
  is held whole (32 channels: 358 MB for an 8192 x 5461 picture);
- where a stage normalises, its statistics are read first, one normalisation at a time, over every
  tile's core (``_norm.whole_picture_stats``: a pass per normalisation that stops where it has
  read; the Dumoulin network's contraction has two, since its third opens the residual stage,
  Magenta's none), then the stage runs tile by tile with the whole picture's statistics;
- the residual blocks run on the whole quarter-size tensor, as the untiled pass runs them;
- the expansion runs tile by tile like the contraction (three normalisations), and each core goes
  into the result as 8-bit pixels.

Each core is the untiled pass's values up to float rounding (the statistics are float64 sums, the
untiled pass's float32), so no seam can show: the tiles are cut, not blended. The picture's edges are
the untiled pass's (reflect padding to multiples of 4 and at each convolution), since a tile on the
picture's edge has that edge as its own.

Speed: the first convolution at full size dominates, once per pass. The tiles are sized so that
each tensor reuses the heap the last tile freed (:func:`auto_tile`, :mod:`nstcam._heap`); context
of 8 px (``HALO``) adds 3-7 % to each tile's work. The 26-style network at 8192 x 5449 took 85.5 s
with 1024 px tiles, 32 px of context, four contraction passes and the kernel's fresh pages, 40.2 s
with this (``bench_print.py --one-pass``).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from nstcam._heap import MMAP_THRESHOLD, keep_freed
from nstcam.fast._norm import Moments, StatsRead, scaled, whole_picture_stats
from nstcam.image import tensor_to_image

__all__ = [
    "HALO",
    "MEMORY_BUDGET",
    "Stages",
    "add_residual",
    "auto_tile",
    "cores",
    "paint_tiled",
    "relu",
    "untiled_bytes",
]

HALO = 8
"""Context (px) read around each core: a multiple of 4, past the stages' reach (7 px of the
contraction, 7 of the expansion, in the picture's pixels)."""
WIDEST = {"multistyle26": 32, "arbitrary": 16}
"""The most channels a window's tensor holds at the picture's full size: the Dumoulin network's
first convolution (32), the Magenta network's upsampled 16 before its last but one convolution."""
MEMORY_BUDGET = 1 << 30
"""An untiled pass estimated past this many bytes (:func:`untiled_bytes`) is tiled."""
BYTES_PER_PIXEL = {"multistyle26": 330, "arbitrary": 300}
"""The untiled pass's peak above the memory before it, in bytes per pixel of the picture: the whole
2048 x 1362 rows of ``tests/benchmarks/bench_print.py --one-pass`` read 334 for the Dumoulin
network (32 channels at full size) and 214-236 for Magenta's (8 there); 300 leaves room for the
arbitrary pass's fixed costs (its style vectors), which weigh more on smaller pictures."""


@dataclass(frozen=True)
class Stages:
    """A fast network for one style as its three stages: ``front`` (photo (N, 3, H, W), multiples of
    4 -> (N, C, H/4, W/4)), ``middle`` (the residual blocks, same shape) and ``back`` (-> the painting
    (N, 3, H, W) in [0, 1])."""

    front: Callable[[torch.Tensor], torch.Tensor]
    middle: Callable[[torch.Tensor], torch.Tensor]
    back: Callable[[torch.Tensor], torch.Tensor]

    def __call__(self, images: torch.Tensor) -> torch.Tensor:
        return self.back(self.middle(self.front(images)))


def add_residual(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """``x + y``, in ``x``'s memory where no gradient is recorded (the whole-picture residual blocks
    then hold three tensors, not four)."""
    return x.add_(y) if not torch.is_grad_enabled() else x + y


def relu(x: torch.Tensor) -> torch.Tensor:
    """ReLU, in place where no gradient is recorded."""
    return x.relu_() if not torch.is_grad_enabled() else F.relu(x)


def auto_tile(net: str) -> int:
    """The tile (core side, px, a multiple of 16) a picture is painted in automatically on network
    ``net``: the largest whose widest tensor (``WIDEST`` channels, float32, core and context) stays
    under glibc's mmap threshold, so that each tile reuses the heap the last one freed
    (:mod:`nstcam._heap`): 480 px for the Dumoulin network, 704 for Magenta's."""
    side = math.isqrt((MMAP_THRESHOLD - 1) // (4 * WIDEST[net]))  # the largest window
    return (side - 2 * HALO) // 16 * 16


def untiled_bytes(net: str, height: int, width: int) -> int:
    """The untiled pass's estimated peak for a ``height`` x ``width`` picture on network ``net``."""
    return BYTES_PER_PIXEL[net] * height * width


def cores(n: int, tile: int) -> list[slice]:
    """Spans of at most ``tile`` (rounded down to a multiple of 4) covering ``0..n`` (a multiple of
    4), of near-equal lengths, each starting and ending on a multiple of 4."""
    quads, per = n // 4, max(1, tile // 4)
    k = math.ceil(quads / per)
    edges = [round(i * quads / k) * 4 for i in range(k + 1)]
    return [slice(a, b) for a, b in itertools.pairwise(edges)]


Window = tuple[torch.Tensor, tuple[slice, slice], tuple[slice, slice]]
"""A tile: its input (1, C, h, w), its core within that input, and the core's place in the stage's
input."""


def _windows(ys: list[slice], xs: list[slice], height: int, width: int, halo: int, read) -> Iterator[Window]:
    for y in ys:
        for x in xs:
            y0, y1 = max(0, y.start - halo), min(height, y.stop + halo)
            x0, x1 = max(0, x.start - halo), min(width, x.stop + halo)
            core = (slice(y.start - y0, y.stop - y0), slice(x.start - x0, x.stop - x0))
            yield read(slice(y0, y1), slice(x0, x1)), core, (y, x)


def _read_stats(stage: Callable, windows: Callable[[], Iterator[Window]]) -> list:
    """The whole picture's (mean, variance) at each normalisation of ``stage``, in order: one pass
    over every window's core per normalisation, each stopping where it has read."""
    known: list = []
    while True:
        reading = Moments()
        for inp, core, _ in windows():
            with whole_picture_stats(known, reading, core, tuple(inp.shape[-2:])):
                try:
                    stage(inp)
                except StatsRead:
                    continue
            return known  # a pass that met no unread normalisation: every one is known
        known.append(reading.mean_var(torch.float32))


def _run_tiled(stage: Callable, windows: Callable[[], Iterator[Window]], known: list) -> Iterator[tuple]:
    """``stage`` over every window with the statistics ``known`` (:func:`_read_stats`); yields
    (the output's core, the core's place) per window."""
    for inp, core, place in windows():
        with whole_picture_stats(known, None, core, tuple(inp.shape[-2:])):
            out = stage(inp)
        fy, fx = out.shape[-2] / inp.shape[-2], out.shape[-1] / inp.shape[-1]
        yield out[..., scaled(core[0], fy), scaled(core[1], fx)], place


def paint_tiled(
    stages: Stages,
    photo: np.ndarray,
    tile: int,
    finish: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    device: torch.device,
    recolour: Callable[[Callable[[], Iterator[tuple]]], Callable[[torch.Tensor], torch.Tensor]] | None = None,
) -> np.ndarray:
    """``photo`` (H, W, 3) uint8 painted by ``stages`` tile by tile (see the module docstring).

    Args:
        tile: the side of a tile's core, px.
        finish: (painting, photo) of a core -> the result there (strength, colours kept per pixel).
        recolour: for a result recoloured by its own global statistics: given a function that
            yields every finished core as (result, photo), returns the per-pixel map to apply.

    Returns:
        The result, (H, W, 3) uint8.
    """
    keep_freed()
    h0, w0 = photo.shape[:2]
    height, width = h0 + (-h0 % 4), w0 + (-w0 % 4)  # reflect-padded to multiples of 4, as untiled
    ys, xs = cores(height, tile), cores(width, tile)

    def pixels(y: slice, x: slice) -> torch.Tensor:
        """The padded picture's ``y``, ``x`` (padded here, not as a whole copy)."""
        a = photo[y.start : min(y.stop, h0), x.start : min(x.stop, w0)]
        a = np.pad(a, ((0, max(0, y.stop - h0)), (0, max(0, x.stop - w0)), (0, 0)), mode="reflect")
        t = torch.from_numpy(np.ascontiguousarray(a))
        return t.permute(2, 0, 1)[None].to(device=device, dtype=torch.float32).div_(255.0)

    quarter: torch.Tensor | None = None

    def front_windows() -> Iterator[Window]:
        return _windows(ys, xs, height, width, HALO, pixels)

    for out, (y, x) in _run_tiled(stages.front, front_windows, _read_stats(stages.front, front_windows)):
        if quarter is None:
            shape = (1, out.shape[1], height // 4, width // 4)
            quarter = torch.empty(shape, device=device, dtype=out.dtype, memory_format=torch.channels_last)
        quarter[..., y.start // 4 : y.stop // 4, x.start // 4 : x.stop // 4] = out
    quarter = stages.middle(quarter)
    qs = [slice(s.start // 4, s.stop // 4) for s in ys]
    qx = [slice(s.start // 4, s.stop // 4) for s in xs]

    def latent(y: slice, x: slice) -> torch.Tensor:
        return quarter[..., y, x]

    def back_windows() -> Iterator[Window]:
        return _windows(qs, qx, height // 4, width // 4, HALO // 4, latent)

    back_stats = _read_stats(stages.back, back_windows)  # read once, for each painting pass

    def finished() -> Iterator[tuple[torch.Tensor, torch.Tensor, tuple[slice, slice]]]:
        for out, (y, x) in _run_tiled(stages.back, back_windows, back_stats):
            y, x = slice(y.start * 4, min(y.stop * 4, h0)), slice(x.start * 4, min(x.stop * 4, w0))
            if y.start >= y.stop or x.start >= x.stop:
                continue  # a core wholly in the padding
            here = pixels(y, x)
            yield finish(out[..., : y.stop - y.start, : x.stop - x.start], here), here, (y, x)

    mapped = recolour(lambda: ((r, p) for r, p, _ in finished())) if recolour is not None else None
    result = np.empty((h0, w0, 3), np.uint8)
    for out, _, (y, x) in finished():
        result[y, x] = np.asarray(tensor_to_image(mapped(out) if mapped is not None else out))
    return result
