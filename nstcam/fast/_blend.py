"""Blending learned styles with paintings, style vectors and one another (issue 65).

A blend is the weighted mean of each style's normalisation scales and shifts (Dumoulin et al. 2017
interpolate exactly these). A painting's or a vector's scales and shifts are what the arbitrary
network's map makes of its style vector; that map is affine (a 1x1 convolution), so a blend of
paintings alone equals the blend of their vectors (:meth:`nstcam.FastStyle.blend_vector`), and a
learned style joins the blend on the same terms. The 26 built-in styles belong to another network
(Dumoulin et al.'s own) and are refused: they blend with one another (``style={3: 0.7, 7: 0.3}``).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from nstcam.fast._arbitrary import STYLE_DIM
from nstcam.fast._learned import LearnedStyle, is_style_file

__all__ = ["MAX_BLEND", "blend_styles", "blend_weights"]

MAX_BLEND = 16
"""The most styles one blend holds."""


def blend_styles(fast: Any, styles: Sequence[Any], weights: Sequence[float] | None = None) -> LearnedStyle:
    """The blend of ``styles`` as one learned style (``FastStyle().blend``): it paints, saves,
    takes ``strength`` and colour preservation like any learned style.

    Args:
        fast: the :class:`nstcam.FastStyle` whose arbitrary network maps paintings and vectors.
        styles: 1 to ``MAX_BLEND`` styles: learned styles (a :class:`LearnedStyle` or its
            ``.safetensors`` file, checked on reading), paintings, or style vectors (1, 100).
        weights: one weight a style, finite and >= 0 with a positive sum (normalised to sum 1);
            default equal.

    Raises:
        ValueError: no styles or too many, weights that do not fit, or a built-in style's index.
        LearnedStyleError: a style file that is not a learned style.
    """
    if isinstance(styles, (str, bytes, Path)) or not isinstance(styles, Sequence) or not styles:
        raise ValueError("styles must be a list of 1 or more styles")
    if len(styles) > MAX_BLEND:
        raise ValueError(f"styles: {len(styles)} given, a blend holds at most {MAX_BLEND}")
    w = blend_weights(weights, len(styles))
    read = [_read(fast, s, i) for i, s in enumerate(styles)]
    flat = [
        sum(float(wi) * r.params[layer][part] for wi, r in zip(w, read, strict=True))
        for layer in range(len(read[0].params))
        for part in (0, 1)
    ]
    names = [r.meta.get("painting", "painting") for r in read]
    parts = [[n, round(float(wi), 6)] for n, wi in zip(names, w, strict=True)]
    label = " + ".join(f"{n} x{wi:.3g}" for n, wi in parts)
    blend = LearnedStyle.of(flat, painting=label, settings={"blend": parts}, losses=[])
    vggs = sorted({r.meta["vgg"] for r in read if "vgg" in r.meta})
    return LearnedStyle(
        blend.params,
        {
            **blend.meta,
            "vgg": "; ".join(vggs)[:300] or "none: a blend of paintings",
            "random_weights": str(any(r.random_weights for r in read)).lower(),
        },
    )


def blend_weights(weights: Sequence[float] | None, n: int) -> torch.Tensor:
    """``n`` blend weights (float64) normalised to sum 1, checked; None: equal."""
    if weights is not None and (not isinstance(weights, Sequence) or len(weights) != n):
        raise ValueError(f"weights must be {n} finite values >= 0 with a positive sum")
    try:
        w = torch.tensor([1.0] * n if weights is None else [float(v) for v in weights], dtype=torch.float64)
    except (TypeError, ValueError):
        raise ValueError(f"weights must be {n} numbers") from None
    if not torch.isfinite(w).all() or (w < 0).any() or w.sum() <= 0:
        raise ValueError(f"weights must be {n} finite values >= 0 with a positive sum")
    return w / w.sum()


def _read(fast: Any, style: Any, i: int) -> LearnedStyle:
    """Style ``i`` of a blend as a learned style (a painting or a vector: its mapped scales and shifts)."""
    if is_style_file(style):
        return LearnedStyle.load(style)
    if isinstance(style, LearnedStyle):
        return style
    if isinstance(style, (bool, int, float, dict)):
        raise ValueError(
            f"styles[{i}] is a built-in style: the 26 built-in styles paint with Dumoulin et al.'s network, "
            "a learned style with the arbitrary network; blend built-in styles with one another "
            "(style={3: 0.7, 7: 0.3})"
        )
    is_vector = isinstance(style, torch.Tensor) and tuple(style.shape) == (1, STYLE_DIM)
    vector = style.to(fast.device, torch.float32) if is_vector else fast.style_vector(style)
    if not torch.isfinite(vector).all():
        raise ValueError(f"styles[{i}]: the style vector must be finite")
    with torch.no_grad():
        mapped = fast.arbitrary_net.transformer.norm_params(vector)
    name = Path(style).stem if isinstance(style, (str, Path)) else ("vector" if is_vector else "painting")
    flat = [p.detach().to("cpu", torch.float32).clone() for pair in mapped for p in pair]
    return LearnedStyle(tuple(zip(flat[0::2], flat[1::2], strict=True)), {"painting": name[:80]})
