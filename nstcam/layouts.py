"""How a layer lays out its activation, and reading it as CAM needs it: (N, C, h, w).

Three layouts cover torchvision's classifiers:

- ``"nchw"``: convolutions (ResNet, ConvNeXt's stages, EfficientNet, MobileNet, DenseNet, VGG...).
- ``"tokens"``: (N, [extra tokens +] h*w, C), ViT-style encoders; the extra (class, distillation)
  tokens come first and are dropped, and the h x w grid is inferred from the token count and the
  input's aspect ratio, not assumed square.
- ``"nhwc"``: (N, h, w, C), channels-last stages such as Swin's.

A layout is read from the model's known structure when the caller says it (``layout=``) or the arch
is known, else from the shape against the input's size; a shape two layouts could explain is refused
with the fix, never guessed. Gradients are laid out like their activations and go through the same
conversion, so the dropped tokens' gradients are ignored.
"""

from __future__ import annotations

import math

import torch

__all__ = ["LAYOUTS", "LayoutError", "detect_layout", "to_nchw", "token_grid"]

LAYOUTS = ("nchw", "tokens", "nhwc")
MAX_EXTRA_TOKENS = 2  # ViT's class token; DeiT's class and distillation tokens


class LayoutError(ValueError):
    """An activation whose layout cannot be read, or was given wrong."""


def _fits(h: int, w: int, in_h: int, in_w: int) -> bool:
    """Whether an h x w grid is the input's downsampling by one stride: some stride s gives both
    sides within one cell of rounding (h in (in_h/s - 1, in_h/s + 1), likewise w)."""
    if h < 1 or w < 1 or h > in_h or w > in_w:
        return False
    lo = max(in_h / (h + 1), in_w / (w + 1))
    hi = min(in_h / (h - 1) if h > 1 else math.inf, in_w / (w - 1) if w > 1 else math.inf)
    return lo < hi


def token_grid(n_tokens: int, in_h: int, in_w: int) -> tuple[int, int, int] | None:
    """(extra tokens, h, w) of a token sequence for an ``in_h`` x ``in_w`` input, or None.

    The grid must hold all but 0-2 leading tokens and have the input's aspect ratio; when several
    counts of extra tokens would fit, the one whose grid matches the aspect most exactly wins, and
    None is returned when two fit equally (ambiguous).
    """
    found = []
    for extra in range(MAX_EXTRA_TOKENS + 1):
        n = n_tokens - extra
        if n < 1:
            continue
        h = max(1, round(math.sqrt(n * in_h / in_w)))
        for hh in {h - 1, h, h + 1}:
            if hh >= 1 and n % hh == 0:
                ww = n // hh
                if _fits(hh, ww, in_h, in_w):
                    found.append((abs(hh * in_w - ww * in_h), extra, hh, ww))
    if not found:
        return None
    found.sort()
    if len(found) > 1 and found[0][0] == found[1][0] and found[0][1:] != found[1][1:]:
        return None
    return found[0][1:]


def detect_layout(shape: tuple[int, ...], in_h: int, in_w: int) -> str:
    """The layout of an activation of ``shape`` for an ``in_h`` x ``in_w`` input, from the shape alone.

    Raises:
        LayoutError: no layout fits, or two do (the message names the ``layout=`` to pass).
    """
    if len(shape) == 3:
        if token_grid(shape[1], in_h, in_w) is None:
            raise LayoutError(
                f"activation of shape {tuple(shape)} is not a token sequence of a {in_h}x{in_w} input "
                "(N, [1-2 extra tokens +] h*w, C): choose another layer"
            )
        return "tokens"
    if len(shape) != 4:
        raise LayoutError(
            f"activation of shape {tuple(shape)}; CAM reads (N, C, h, w), (N, h, w, C) or (N, tokens, C): "
            "choose another layer"
        )
    nchw, nhwc = _fits(shape[2], shape[3], in_h, in_w), _fits(shape[1], shape[2], in_h, in_w)
    if nchw and nhwc:
        raise LayoutError(
            f"activation of shape {tuple(shape)} reads as (N, C, h, w) and as (N, h, w, C) for a "
            f"{in_h}x{in_w} input: say which with layout='nchw' or layout='nhwc'"
        )
    if not (nchw or nhwc):
        raise LayoutError(
            f"activation of shape {tuple(shape)} has no spatial grid of a {in_h}x{in_w} input: choose "
            "another layer, or say its layout with layout='nchw' or 'nhwc'"
        )
    return "nchw" if nchw else "nhwc"


def to_nchw(t: torch.Tensor, layout: str, in_h: int, in_w: int) -> torch.Tensor:
    """``t`` read as (N, C, h, w): a view where the layout allows (tokens: the extra ones dropped).

    Raises:
        LayoutError: ``t``'s shape does not fit ``layout`` (a wrong ``layout=`` is never transposed
            silently into something else).
    """
    shape = tuple(t.shape)
    if layout == "nchw":
        if t.ndim != 4 or not _fits(shape[2], shape[3], in_h, in_w):
            raise LayoutError(
                f"layout='nchw' does not fit an activation of shape {shape} (a {in_h}x{in_w} input)"
            )
        return t
    if layout == "nhwc":
        if t.ndim != 4 or not _fits(shape[1], shape[2], in_h, in_w):
            raise LayoutError(
                f"layout='nhwc' does not fit an activation of shape {shape} (a {in_h}x{in_w} input)"
            )
        return t.permute(0, 3, 1, 2)
    if layout == "tokens":
        grid = token_grid(shape[1], in_h, in_w) if t.ndim == 3 else None
        if grid is None:
            raise LayoutError(
                f"layout='tokens' does not fit an activation of shape {shape}: expected (N, [1-2 extra "
                f"tokens +] h*w, C) with an h x w grid of the {in_h}x{in_w} input"
            )
        extra, h, w = grid
        return t[:, extra:].reshape(t.shape[0], h, w, t.shape[2]).permute(0, 3, 1, 2)
    raise ValueError(f"layout must be one of {', '.join(LAYOUTS)} or None, got {layout!r}")
