"""How a layer lays out its activation, and reading it as CAM needs it: channels first, (N, C, *grid).

Five layouts cover torchvision's classifiers and video classifiers:

- ``"nchw"``: convolutions (ResNet, ConvNeXt's stages, EfficientNet, MobileNet, DenseNet, VGG...).
- ``"tokens"``: (N, [extra tokens +] grid, C), ViT-style encoders; the extra (class, distillation)
  tokens come first and are dropped, and the grid is inferred from the token count and the input's
  aspect ratio, not assumed square. On a clip (MViT's (N, 1 + t*h*w, C)) the grid is t x h x w: of
  the factorings that fit, the one that downsamples time least (and never more than space) wins.
- ``"nhwc"``: (N, h, w, C), channels-last stages such as Swin's.
- ``"ncthw"``: (N, C, t, h, w), 3D convolutions over a clip (R3D, MC3, R(2+1)D, S3D) or a volume.
- ``"nthwc"``: (N, t, h, w, C), channels-last 3D stages such as Swin3D's.

The input's grid is what follows its batch and channel dimensions: (H, W) for an image batch
(N, 3, H, W), (T, H, W) for a clip batch (N, 3, T, H, W). A layout is read from the model's known
structure when the caller says it (``layout=``) or the arch is known, else from the shape against
the input's grid; a shape two layouts could explain is refused with the fix, never guessed.
Gradients are laid out like their activations and go through the same conversion, so the dropped
tokens' gradients are ignored.
"""

from __future__ import annotations

import math

import torch

from nstcam._choices import one_of

__all__ = [
    "LAYOUTS",
    "LayoutError",
    "channel_dim",
    "detect_layout",
    "input_grid",
    "to_channels_first",
    "to_nchw",
    "token_grid",
]

LAYOUTS = ("nchw", "tokens", "nhwc", "ncthw", "nthwc")
MAX_EXTRA_TOKENS = 2  # ViT's class token; DeiT's class and distillation tokens
_CHANNEL_DIM = {"nchw": 1, "nhwc": 3, "tokens": 2, "ncthw": 1, "nthwc": 4}


class LayoutError(ValueError):
    """An activation whose layout cannot be read, or was given wrong."""


def input_grid(x: torch.Tensor) -> tuple[int, ...]:
    """The grid of an input batch: (H, W) of (N, 3, H, W), (T, H, W) of a clip's (N, 3, T, H, W)."""
    return tuple(int(s) for s in x.shape[2:])


def channel_dim(layout: str) -> int:
    """The dimension that holds the channels in an activation of ``layout``."""
    return _CHANNEL_DIM[layout]


def _fits(h: int, w: int, in_h: int, in_w: int) -> bool:
    """Whether an h x w grid is the input's downsampling by one stride: some stride s gives both
    sides within one cell of rounding (h in (in_h/s - 1, in_h/s + 1), likewise w)."""
    if h < 1 or w < 1 or h > in_h or w > in_w:
        return False
    lo = max(in_h / (h + 1), in_w / (w + 1))
    hi = min(in_h / (h - 1) if h > 1 else math.inf, in_w / (w - 1) if w > 1 else math.inf)
    return lo < hi


def _fits_grid(grid: tuple[int, ...], size: tuple[int, ...]) -> bool:
    """Whether ``grid`` is a downsampling of the input's grid ``size``: the same number of
    dimensions; (h, w) by one stride (:func:`_fits`); a clip's frames t by any stride, 1 <= t <= T."""
    if len(grid) != len(size):
        return False
    if len(size) == 3 and not 1 <= grid[0] <= size[0]:
        return False
    return _fits(grid[-2], grid[-1], size[-2], size[-1])


def _plane_grids(n: int, in_h: int, in_w: int) -> list[tuple[int, int, int]]:
    """(aspect error, h, w) of each h x w = n grid near the input's aspect that fits it."""
    h = max(1, round(math.sqrt(n * in_h / in_w)))
    found = []
    for hh in {h - 1, h, h + 1}:
        if hh >= 1 and n % hh == 0 and _fits(hh, n // hh, in_h, in_w):
            found.append((abs(hh * in_w - (n // hh) * in_h), hh, n // hh))
    return found


def token_grid(n_tokens: int, *size: int) -> tuple[int, ...] | None:
    """(extra tokens, *grid) of a token sequence for an input of grid ``size`` ((H, W) or (T, H, W)),
    or None.

    The grid must hold all but 0-2 leading tokens and have the input's aspect ratio; when several
    counts of extra tokens would fit, the one whose grid matches the aspect most exactly wins, and
    None is returned when two fit equally (ambiguous). On a clip, t x h x w: the least temporal
    downsampling wins, never more than the spatial one (MViT's 8 x 7 x 7 of 16 x 224 x 224).
    """
    if len(size) not in (2, 3):
        raise ValueError(f"an input grid is (H, W) or (T, H, W); got {size}")
    found = []
    for extra in range(MAX_EXTRA_TOKENS + 1):
        n = n_tokens - extra
        if n < 1:
            continue
        if len(size) == 2:
            found += [(err, extra, h, w) for err, h, w in _plane_grids(n, *size)]
            continue
        for t in range(min(n, size[0]), 0, -1):
            if n % t:
                continue
            for err, h, w in _plane_grids(n // t, size[1], size[2]):
                if size[0] / t <= size[1] / h:  # time downsampled no more than space
                    found.append((size[0] // t, err, extra, t, h, w))
    if not found:
        return None
    found.sort()
    rank = len(found[0]) - len(size) - 1  # the sort keys before (extra, *grid)
    if len(found) > 1 and found[0][:rank] == found[1][:rank] and found[0][rank:] != found[1][rank:]:
        return None
    return found[0][rank:]


def _space(size: tuple[int, ...]) -> str:
    return "x".join(str(s) for s in size)


def detect_layout(shape: tuple[int, ...], *size: int) -> str:
    """The layout of an activation of ``shape`` for an input of grid ``size`` ((H, W) of an image,
    (T, H, W) of a clip), from the shape alone.

    Raises:
        LayoutError: no layout fits, or two do (the message names the ``layout=`` to pass).
    """
    space = _space(size)
    if len(shape) == 3:
        if token_grid(shape[1], *size) is None:
            raise LayoutError(
                f"activation of shape {tuple(shape)} is not a token sequence of a {space} input "
                "(N, [1-2 extra tokens +] grid, C): choose another layer"
            )
        return "tokens"
    first, last = ("nchw", "nhwc") if len(size) == 2 else ("ncthw", "nthwc")
    if len(shape) != len(size) + 2:
        raise LayoutError(
            f"activation of shape {tuple(shape)}; CAM reads a {space} input's activation as "
            f"({first}), ({last}) or (N, tokens, C): choose another layer"
        )
    channels_first, channels_last = _fits_grid(shape[2:], size), _fits_grid(shape[1:-1], size)
    if channels_first and channels_last:
        raise LayoutError(
            f"activation of shape {tuple(shape)} reads as ({first}) and as ({last}) for a {space} "
            f"input: say which with layout='{first}' or layout='{last}'"
        )
    if not (channels_first or channels_last):
        raise LayoutError(
            f"activation of shape {tuple(shape)} has no spatial grid of a {space} input: choose "
            f"another layer, or say its layout with layout='{first}' or '{last}'"
        )
    return first if channels_first else last


def to_channels_first(t: torch.Tensor, layout: str, *size: int) -> torch.Tensor:
    """``t`` read as (N, C, *grid) for an input of grid ``size``: a view where the layout allows
    (tokens: the extra ones dropped).

    Raises:
        LayoutError: ``t``'s shape does not fit ``layout`` (a wrong ``layout=`` is never transposed
            silently into something else).
    """
    shape, space = tuple(t.shape), _space(size)
    one_of("layout", layout, LAYOUTS, also=" or None")
    if layout == "tokens":
        grid = token_grid(shape[1], *size) if t.ndim == 3 else None
        if grid is None:
            raise LayoutError(
                f"layout='tokens' does not fit an activation of shape {shape}: expected (N, [1-2 extra "
                f"tokens +] grid, C) with a grid of the {space} input"
            )
        extra, *cells = grid
        out = t[:, extra:].reshape(t.shape[0], *cells, t.shape[2])
        return out.permute(0, out.ndim - 1, *range(1, out.ndim - 1))
    dims = 4 if layout in ("nchw", "nhwc") else 5
    first = layout in ("nchw", "ncthw")
    grid = shape[2:] if first else shape[1:-1]
    if t.ndim != dims or len(size) != dims - 2 or not _fits_grid(grid, size):
        raise LayoutError(f"layout={layout!r} does not fit an activation of shape {shape} (a {space} input)")
    return t if first else t.permute(0, dims - 1, *range(1, dims - 1))


def to_nchw(t: torch.Tensor, layout: str, *size: int) -> torch.Tensor:
    """:func:`to_channels_first`, under the name it had when images were all it read."""
    return to_channels_first(t, layout, *size)
