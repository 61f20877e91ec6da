"""The instance normalisation both fast networks use, with a scale and shift of the style's own.

Without gradients (painting), the statistics are one pass of ``batch_norm_update_stats`` per image,
on one thread, and the normalisation is done in place:

- on a channels-last tensor that pass is about 10x faster than ``var_mean`` on the CPU (6.4 ms vs
  67.5 ms for 32 x 512 x 512), and two threads made it no faster;
- on one thread its sums, and so the picture, are the same bits whatever count of threads the call
  was given (``nstcam._threads`` sizes that count to the load; the convolutions' bits do not depend
  on it, a split reduction's do);
- in place: a new 32 x 512 x 512 tensor is 33.5 MB, past glibc's largest mmap threshold, and its
  first writes cost more than the arithmetic (26.6 ms vs 6 ms here).

With gradients (training), ``var_mean`` and new tensors, which autograd differentiates.

A picture painted in tiles (:mod:`nstcam.fast._tiled`) normalises each tile with the statistics of
the whole picture: inside :func:`whole_picture_stats` the normalisations of this call (a context
variable: no other thread's call sees it) take the statistics already read, and the first one not
yet read adds the tile's core to its sums and stops the pass (:class:`StatsRead`).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

import torch

from nstcam._threads import one_thread

__all__ = ["Moments", "StatsRead", "instance_norm", "scaled", "whole_picture_stats"]


CHUNK = 1 << 18
"""Positions whose statistics are read in one float32 pass; a larger image's chunks are summed in
float64. One pass over a 2048 x 1362 picture's 2.8 million positions left its statistics far
enough off for the 26-style network's result to be 4 levels (mean 0.076) from the float64 pass;
in chunks it is within 1 (``bench_print.py``)."""


class StatsRead(Exception):  # noqa: N818 (a stop, not an error)
    """A tile's pass stopped where it added its core to the statistics being read."""


class Moments:
    """Per-channel sums (float64) of one normalisation's input over the tiles' cores: the whole
    picture's mean and biased variance, as the untiled pass reads them."""

    def __init__(self) -> None:
        self.n, self.s, self.s2 = 0, None, None

    def add(self, x: torch.Tensor) -> None:
        """Adds ``x`` (1, C, h, w), ``CHUNK`` positions at a time: each chunk's mean and variance
        as the untiled pass reads them (one pass, one thread), weighted by its count into the
        float64 sums."""
        rows = max(1, CHUNK // x.shape[-1])
        for top in range(0, x.shape[-2], rows):
            part = x[..., top : top + rows, :]
            with one_thread():
                mean, var = torch.batch_norm_update_stats(_laid_out(part), None, None, 0.0)
            n = part.shape[0] * part.shape[2] * part.shape[3]
            mean, var = mean.double(), var.double()
            s, s2 = n * mean, n * (var + mean.square())
            self.n += n
            self.s, self.s2 = (s, s2) if self.s is None else (self.s + s, self.s2 + s2)

    def mean_var(self, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """(mean, variance), (1, C, 1, 1) each."""
        mean = self.s / self.n
        var = (self.s2 / self.n - mean.square()).clamp_min(0)
        return mean.to(dtype)[None, :, None, None], var.to(dtype)[None, :, None, None]


class _TileStats:
    """One tile's pass: the statistics read so far, and where the tile's core lies in its input."""

    def __init__(
        self, known: list, reading: Moments | None, core: tuple[slice, slice], size: tuple[int, int]
    ):
        self.known, self.reading, self.core, self.size, self.count = known, reading, core, size, 0

    def take(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        k, self.count = self.count, self.count + 1
        if k < len(self.known):
            mean, var = self.known[k]
            return mean.to(x.dtype), var.to(x.dtype)
        if self.reading is None:
            raise RuntimeError("a tile's pass met a normalisation whose statistics were not read")
        fy, fx = x.shape[-2] / self.size[0], x.shape[-1] / self.size[1]  # this layer's scale
        core = x[..., scaled(self.core[0], fy), scaled(self.core[1], fx)]
        self.reading.add(core)
        raise StatsRead


def scaled(span: slice, factor: float) -> slice:
    """``span`` of a pass's input at a layer ``factor`` times its size (cores lie on multiples of 4,
    so every scale the networks reach, 1/4 to 4, lands on whole positions)."""
    return slice(round(span.start * factor), round(span.stop * factor))


_TILE: ContextVar[_TileStats | None] = ContextVar("nstcam_fast_tile_stats", default=None)


@contextmanager
def whole_picture_stats(
    known: list, reading: Moments | None, core: tuple[slice, slice], size: tuple[int, int]
) -> Iterator[None]:
    """Inside, this call's normalisations take ``known`` (mean, variance) in the order they meet
    them; the next one adds its input's ``core`` (given in the pass input's ``size``, scaled to each
    layer's) to ``reading`` and raises :class:`StatsRead` (``reading`` None: every one is known)."""
    token = _TILE.set(_TileStats(known, reading, core, size))
    try:
        yield
    finally:
        _TILE.reset(token)


def _training(*tensors: torch.Tensor) -> bool:
    """Autograd records this normalisation: any of ``tensors`` asks for a gradient (the input, or a
    style's scale and shift being learned)."""
    return torch.is_grad_enabled() and any(t.requires_grad for t in tensors)


def _laid_out(x: torch.Tensor) -> torch.Tensor:
    """``x`` in the layout its statistics are fastest in: channels last from 8 channels, else channels
    first (3 x 512 x 512: 2.8 ms with the copy vs 8.9 ms without; 32 x 512 x 512: 9.3 vs 136 ms)."""
    return x if x.shape[1] >= 8 else x.contiguous()


def _image_moments(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """One image's (1, C, h, w) per-channel mean and biased variance, (C,) each: one float32 pass
    up to ``CHUNK`` positions, else float64 sums over chunks."""
    if x.shape[-2] * x.shape[-1] <= CHUNK:
        with one_thread():
            return torch.batch_norm_update_stats(_laid_out(x), None, None, 0.0)
    m = Moments()
    m.add(x)
    mean, var = m.mean_var(x.dtype)
    return mean.flatten(), var.flatten()


def _moments(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Each image's per-channel mean and biased variance, (N, C, 1, 1) each."""
    if _training(x):
        var, mean = torch.var_mean(x, (2, 3), correction=0, keepdim=True)
        return mean, var
    stats = [_image_moments(one[None]) for one in x]
    mean = torch.stack([m for m, _ in stats])[..., None, None]
    var = torch.stack([v for _, v in stats])[..., None, None]
    return mean, var


def instance_norm(x: torch.Tensor, scale: torch.Tensor, shift: torch.Tensor, eps: float) -> torch.Tensor:
    """``(x - mean) / sqrt(var + eps) * scale + shift``, each image's and channel's statistics;
    ``scale`` and ``shift`` broadcast as (N, C, 1, 1). Overwrites ``x`` when no gradient is recorded
    (pass a tensor of the network's own, such as a convolution's output)."""
    tile = _TILE.get()
    mean, var = tile.take(x) if tile is not None and not _training(x, scale, shift) else _moments(x)
    a = scale * torch.rsqrt(var + eps)
    b = shift - mean * a
    if _training(x, scale, shift):
        return torch.addcmul(b, x, a)
    return x.mul_(a).add_(b)
